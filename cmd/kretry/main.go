// Command kretry is the Kafka retry-topic and dead-letter sidecar. Its
// commands: run, demo, gameday, broker, validate, lag, parking release,
// dlq list|show|stats|redrive|discard, version and help.
//
// `kretry help` prints each one's usage line (flags included), and
// `kretry help COMMAND` (or `kretry COMMAND -h`) describes one; the
// commands are documented in commands.go, which those print.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go watchSignals(sigs, cancel, slog.Default, os.Exit, secondSignalMessage(os.Args[1:]))
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(sigs)
	os.Exit(code)
}

// watchSignals turns the first SIGTERM/SIGINT into a clean shutdown
// (cancel) and a second one, while that shutdown still runs, into an
// immediate exit with status 1, logged with msg (secondSignalMessage)
// through the logger of the moment (kretry run's, once it has set it).
func watchSignals(sigs <-chan os.Signal, cancel context.CancelFunc, log func() *slog.Logger, exit func(int), msg string) {
	if _, ok := <-sigs; !ok {
		return
	}
	cancel()
	s, ok := <-sigs
	if !ok {
		return
	}
	log().Error(msg, "signal", s.String())
	exit(exitFail)
}

// secondSignalMessage is the line of a second signal for the command in
// args: only run and demo have deliveries in flight to speak of.
func secondSignalMessage(args []string) string {
	const exiting = "second signal while shutting down: exiting now"
	cmd := ""
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "run":
		return exiting + ", without waiting for the deliveries in flight; " +
			"what they did is not committed and their records are delivered again after a restart"
	case "demo":
		return exiting + ", without waiting for the deliveries in flight"
	}
	return exiting
}
