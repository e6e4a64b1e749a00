package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/demo"
	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/flow"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // a runtime failure, or a demo that lost records
	exitUsage = 2 // bad flags or a bad config
)

// run is the whole program; main only wires signals and the exit status,
// so tests can start any subcommand in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, topUsage())
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "run":
		return cmdRun(ctx, args, stdout, stderr)
	case "demo":
		return cmdDemo(ctx, args, stdout, stderr)
	case "gameday":
		return cmdGameday(ctx, args, stdout, stderr)
	case "broker":
		return cmdBroker(ctx, args, stdout, stderr)
	case "validate":
		return cmdValidate(args, stdout, stderr)
	case "lag":
		return cmdLag(ctx, args, stdout, stderr)
	case "parking":
		return cmdParking(ctx, args, stdout, stderr)
	case "dlq":
		return cmdDLQ(ctx, args, stdout, stderr)
	case "version", "--version":
		return cmdVersion(args, stdout, stderr)
	case "help":
		return cmdHelp(ctx, args, stdout, stderr)
	case "-h", "-help", "--help":
		fmt.Fprint(stdout, topUsage())
		return exitOK
	default:
		fmt.Fprintf(stderr, "kretry: unknown command %q%s\n\n%s", cmd, didYouMean(cmd), topUsage())
		return exitUsage
	}
}

// loadConfig loads the file at path (from -c/--config or KRETRY_CONFIG)
// for command c; on failure it prints why and returns the exit status.
func loadConfig(c *command, path string, stderr io.Writer) (*config.Config, int) {
	if path == "" {
		fmt.Fprintf(stderr, "kretry %s: no config file: pass -c config.yaml (or set %s)\n", c.name, config.EnvConfigFile)
		return nil, exitUsage
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(stderr, "kretry %s: invalid config %s:\n%s\n", c.name, path, indent(err.Error()))
		return nil, exitUsage
	}
	return cfg, exitOK
}

// commandClients builds a command's Kafka clients of cfg and checks that
// a broker answers. The clients' own logs go to stderr at error only: the
// caller reports an unreachable broker once, in its own words, from the
// returned error (CommandClients' or Ping's).
func commandClients(ctx context.Context, cfg *config.Config, stderr io.Writer) (*sidecar.Clients, error) {
	kc, err := sidecar.CommandClients(cfg, newLogger(config.Log{Level: "error", Format: "text"}, stderr))
	if err != nil {
		return nil, err
	}
	if err := kc.Ping(ctx); err != nil {
		return nil, err
	}
	return kc, nil
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	fs := validateCmd.flagSet(stderr)
	path := configFlag(fs)
	if code, done := validateCmd.parse(fs, args, stdout, stderr); done {
		return code
	}
	cfg, code := loadConfig(validateCmd, *path, stderr)
	if code != exitOK {
		return code
	}
	// validate answers "will kretry run start with this?", so it checks
	// what only run needs as well.
	if err := cfg.Admin.CheckToken(); err != nil {
		fmt.Fprintf(stderr, "kretry validate: invalid config %s:\n  %v\n", *path, err)
		return exitUsage
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "kretry validate: warning: %s\n", w)
	}
	names := make([]string, len(cfg.Topics))
	for i, t := range cfg.Topics {
		names[i] = t.Name
	}
	fmt.Fprintf(stdout, "%s: OK (%d topic(s): %s)\n", *path, len(cfg.Topics), strings.Join(names, ", "))
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

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := runCmd.flagSet(stderr)
	path := configFlag(fs)
	if code, done := runCmd.parse(fs, args, stdout, stderr); done {
		return code
	}
	cfg, code := loadConfig(runCmd, *path, stderr)
	if code != exitOK {
		return code
	}
	if err := cfg.Admin.CheckToken(); err != nil { // only run serves the admin API
		fmt.Fprintf(stderr, "kretry run: invalid config %s:\n  %v\n", *path, err)
		return exitUsage
	}
	log := newLogger(cfg.Log, stderr)
	slog.SetDefault(log)
	log.Info("kretry starting", "version", flow.Version, "topics", len(cfg.Topics), "brokers", cfg.Kafka.Brokers)
	for _, w := range cfg.Warnings() {
		log.Warn("config: " + w)
	}
	if err := sidecar.Run(ctx, cfg, sidecar.Options{Logger: log}); err != nil {
		log.Error("kretry stopped with an error", "err", err)
		return exitFail
	}
	log.Info("kretry stopped cleanly")
	return exitOK
}

func cmdBroker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := brokerCmd.flagSet(stderr)
	listen := fs.String("listen", config.DefaultEmbeddedListen, "`ADDR` (host:port) to listen on, also the address advertised to clients")
	dataDir := fs.String("data-dir", config.DefaultEmbeddedDataDir, "`DIR` the log persists in, locked while the broker runs; \"\" keeps it in memory")
	partitions := fs.Int("partitions", config.DefaultPartitions, "create the topics the broker creates itself with `N` partitions")
	if code, done := brokerCmd.parse(fs, args, stdout, stderr); done {
		return code
	}
	if *partitions < 1 {
		fmt.Fprintf(stderr, "kretry broker: --partitions %d must be at least 1\n", *partitions)
		return exitUsage
	}
	if _, port, err := net.SplitHostPort(*listen); err != nil || port == "" {
		fmt.Fprintf(stderr, "kretry broker: --listen %q: want HOST:PORT, such as %s (:PORT for every interface)\n", *listen, config.DefaultEmbeddedListen)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	b, err := broker.Start(broker.Config{Listen: *listen, ListenFrom: "--listen", DataDir: *dataDir, Partitions: int32(*partitions), Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "kretry broker: %v\n", err)
		return exitFail
	}
	where := fmt.Sprintf("data dir %q", *dataDir)
	if *dataDir == "" {
		where = "in memory"
	}
	fmt.Fprintf(stdout, "embedded Kafka-protocol broker listening on %s (%s); Ctrl-C to stop\n", strings.Join(b.Addrs(), ","), where)
	<-ctx.Done()
	b.Close()
	fmt.Fprintln(stdout, "broker stopped")
	return exitOK
}

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := demoCmd.flagSet(stderr)
	records := fs.Int("records", 2000, "produce `N` order records")
	asJSON := fs.Bool("json", false, "print the report as one JSON object (fields: see README.md)")
	quiet := fs.Bool("quiet", false, "no progress line on stderr")
	if code, done := demoCmd.parse(fs, args, stdout, stderr); done {
		return code
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
	if r.TimedOut {
		fmt.Fprintf(w, "not settled    %d  (still retrying, parked or held when the demo stopped waiting)\n", r.Unsettled)
	}
	fmt.Fprintf(w, "duration       %.1fs\n", float64(r.DurationMS)/1000)
	switch {
	case r.OK:
		fmt.Fprintln(w, "\nOK: every record was acknowledged or dead-lettered exactly once, each key in order.")
	case r.TimedOut && r.Lost == 0 && r.DLQDuplicates == 0 && r.OrderViolations == 0:
		verdict := "FAILED"
		if r.Interrupted {
			verdict = "INTERRUPTED"
		}
		fmt.Fprintf(w, "\n%s: %s with %s not yet settled (still retrying or held; not known lost): %s\n",
			verdict, stoppedWaiting(r), countRecords(r.Unsettled), strings.Join(firstIDs(r.UnsettledIDs, r.Unsettled, 10), "; "))
	default:
		if r.TimedOut {
			fmt.Fprintf(w, "\n%s with %s not yet settled\n", stoppedWaiting(r), countRecords(r.Unsettled))
		}
		fmt.Fprintln(w, "\nFAILED: records were lost, duplicated in the DLQ or delivered out of order:", strings.Join(append(r.LostIDs, r.OrderExamples...), "; "))
	}
}

// stoppedWaiting says why a demo that timed out stopped waiting: it was
// interrupted, or it waited its whole timeout.
func stoppedWaiting(r *demo.Report) string {
	if r.Interrupted {
		return fmt.Sprintf("the demo was interrupted after %.1fs", float64(r.DurationMS)/1000)
	}
	return fmt.Sprintf("the demo gave up waiting after %s", time.Duration(r.TimeoutMS)*time.Millisecond)
}

// firstIDs is at most n of ids, and a count of the rest of total.
func firstIDs(ids []string, total, n int) []string {
	ids = ids[:min(len(ids), n):min(len(ids), n)]
	if total > len(ids) {
		ids = append(ids, fmt.Sprintf("and %d more", total-len(ids)))
	}
	return ids
}
