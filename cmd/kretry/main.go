// Command kretry is the Kafka retry-topic and dead-letter sidecar.
//
//	kretry run -c FILE
//	kretry demo [--records N] [--json] [--quiet]
//	kretry broker [--listen ADDR] [--data-dir DIR] [--partitions N]
//	kretry validate -c FILE
//	kretry lag -c FILE [--json] [--watch [--interval DURATION]]
//	kretry parking release -c FILE --topic TOPIC --key KEY [--partition N]
//	kretry version
//	kretry help [COMMAND]
//
// `kretry help COMMAND` (or `kretry COMMAND -h`) describes each one; the
// commands are documented in help.go.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
