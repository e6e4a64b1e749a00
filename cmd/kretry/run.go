package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/kretry/kretry/pkg/broker"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/demo"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/pkg/sidecar"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // a runtime failure, or a demo that lost records
	exitUsage = 2 // bad flags or a bad config
)

const usage = `kretry — Kafka retry-topic and dead-letter sidecar

Usage:
  kretry run      -c config.yaml        run the sidecar until SIGTERM/SIGINT
  kretry demo     [--records N] [--json] the whole job on an embedded broker
  kretry broker   [--listen ADDR] [--data-dir DIR]
                                        run the embedded broker alone
  kretry validate -c config.yaml        check a config and exit
  kretry lag      -c config.yaml [--json] [--watch]  consumer lag, age and status
  kretry parking release -c config.yaml --topic T --key K
                                        release a key held after a dead letter
  kretry version

The config path may also come from KRETRY_CONFIG. Every config key can be
overridden from the environment (KRETRY_APP__URL=…); see README.md.
`

// run is the whole program; main only wires signals and the exit status,
// so tests can start any subcommand in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, args, stderr)
	case "demo":
		return cmdDemo(ctx, args, stdout, stderr)
	case "broker":
		return cmdBroker(ctx, args, stdout, stderr)
	case "validate":
		return cmdValidate(args, stdout, stderr)
	case "lag":
		return cmdLag(ctx, args, stdout, stderr)
	case "parking":
		return cmdParking(ctx, args, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "kretry", engine.Version)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "kretry: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kretry "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// loadConfig parses -c/--config (or KRETRY_CONFIG) and loads the file.
func loadConfig(name string, args []string, stderr io.Writer) (*config.Config, string, int) {
	fs := newFlags(name, stderr)
	path := fs.String("c", os.Getenv(config.EnvConfigFile), "config file (YAML)")
	fs.StringVar(path, "config", *path, "config file (YAML)")
	if err := fs.Parse(args); err != nil {
		return nil, "", exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "kretry %s: unexpected argument %q\n", name, fs.Arg(0))
		return nil, "", exitUsage
	}
	if *path == "" {
		fmt.Fprintf(stderr, "kretry %s: no config file: pass -c config.yaml (or set %s)\n", name, config.EnvConfigFile)
		return nil, "", exitUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "kretry %s: invalid config %s:\n%s\n", name, *path, indent(err.Error()))
		return nil, *path, exitUsage
	}
	return cfg, *path, exitOK
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	cfg, path, code := loadConfig("validate", args, stderr)
	if code != exitOK {
		return code
	}
	names := make([]string, len(cfg.Topics))
	for i, t := range cfg.Topics {
		names[i] = t.Name
	}
	fmt.Fprintf(stdout, "%s: OK (%d topic(s): %s)\n", path, len(cfg.Topics), strings.Join(names, ", "))
	return exitOK
}

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func cmdRun(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, _, code := loadConfig("run", args, stderr)
	if code != exitOK {
		return code
	}
	log := newLogger(cfg.Log, stderr)
	slog.SetDefault(log)
	log.Info("kretry starting", "version", engine.Version, "topics", len(cfg.Topics), "brokers", cfg.Kafka.Brokers)
	if err := sidecar.Run(ctx, cfg, sidecar.Options{Logger: log}); err != nil {
		log.Error("kretry stopped with an error", "err", err)
		return exitFail
	}
	log.Info("kretry stopped cleanly")
	return exitOK
}

func cmdBroker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("broker", stderr)
	listen := fs.String("listen", config.DefaultEmbeddedListen, "host:port to listen on (also the address advertised to clients)")
	dataDir := fs.String("data-dir", config.DefaultEmbeddedDataDir, `directory the log persists in ("" keeps it in memory)`)
	partitions := fs.Int("partitions", config.DefaultPartitions, "partitions of auto-created topics")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *partitions < 1 {
		fmt.Fprintf(stderr, "kretry broker: --partitions %d must be at least 1\n", *partitions)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	b, err := broker.Start(broker.Config{Listen: *listen, DataDir: *dataDir, Partitions: int32(*partitions), Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "kretry broker: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "embedded Kafka-protocol broker listening on %s (data dir %q); Ctrl-C to stop\n", strings.Join(b.Addrs(), ","), *dataDir)
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(stdout, "broker stopped")
	return exitOK
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", stderr)
	records := fs.Int("records", 2000, "records to produce")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	quiet := fs.Bool("quiet", false, "no progress line")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if *records < 1 {
		fmt.Fprintf(stderr, "kretry demo: --records %d must be at least 1\n", *records)
		return exitUsage
	}
	o := demo.Options{Records: *records, Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if !*quiet {
		o.Progress = stderr
		if f, ok := stderr.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				o.Live = true
			}
		}
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "kretry demo: %d order records through tiers %v; the sample app fails some on purpose\n", *records, demo.Tiers)
	}
	r, err := demo.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "kretry demo: %v\n", err)
		return exitFail
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(r); err != nil {
			return exitFail
		}
	} else {
		printReport(stdout, r)
	}
	if !r.OK {
		return exitFail
	}
	return exitOK
}

func printReport(w io.Writer, r *demo.Report) {
	fmt.Fprintf(w, "\nproduced       %d\n", r.Produced)
	fmt.Fprintf(w, "delivered      %d  (acknowledged by the app; %d repeated deliveries)\n", r.Delivered, r.Redelivered)
	for _, t := range r.TierTopics {
		fmt.Fprintf(w, "retried        %d  via %s\n", r.Retried[t], t)
	}
	fmt.Fprintf(w, "dead-lettered  %d  (permanent %d, exhausted %d; DLQ duplicates %d)\n",
		r.DeadLettered, r.DeadLetteredByClass["permanent"], r.DeadLetteredByClass["exhausted"], r.DLQDuplicates)
	fmt.Fprintf(w, "parked         %d  (records parked behind a retrying record of their key; at most %d keys blocked at once)\n", r.Parked, r.MaxBlockedKeys)
	fmt.Fprintf(w, "order          %d violations (per key, acknowledged in source order)\n", r.OrderViolations)
	fmt.Fprintf(w, "lost           %d\n", r.Lost)
	fmt.Fprintf(w, "duration       %.1fs\n", float64(r.DurationMS)/1000)
	if r.OK {
		fmt.Fprintln(w, "\nOK: every record was acknowledged or dead-lettered exactly once, each key in order.")
	} else {
		fmt.Fprintln(w, "\nFAILED: records were lost, duplicated in the DLQ or delivered out of order:", strings.Join(append(r.LostIDs, r.OrderExamples...), "; "))
	}
}
