package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/pkg/config"
)

// cmdLag is `kretry lag -c FILE [--json] [--watch [--interval D]]
// [--metrics URL]…`: one scan of the lag monitor printed as a table (or
// JSON), or one per interval until interrupted, with each pipeline's
// overload signals (lag_signals.go). With kafka.brokers [embedded] it
// dials embedded.listen, where `kretry run` or `kretry broker` serves.
// The exit status is 1 when a single scan could not measure everything.
func cmdLag(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := lagCmd.flagSet(stderr)
	path := configFlag(fs)
	asJSON := fs.Bool("json", false, "print each scan as one JSON object (one line per scan with --watch)")
	watch := fs.Bool("watch", false, "scan again every --interval until interrupted; the status needs lag.window scans")
	interval := durationFlag(fs, "interval", 5*time.Second, "time between scans with --watch, a Go `DURATION` such as 10s, at least "+config.MinLagInterval.String())
	var metricsFlags []string
	fs.Func("metrics", "a running instance's metrics `URL` (host:port or http://host:port/metrics), for its breaker, limit, retry share, budget and top failures; repeat for several instances; default metrics.listen of the config; none to read none", func(v string) error {
		metricsFlags = append(metricsFlags, v)
		return nil
	})
	if code, done := lagCmd.parse(fs, args, stdout, stderr); done {
		return code
	}
	if *interval < config.MinLagInterval {
		fmt.Fprintf(stderr, "kretry lag: --interval %v must be at least %v\n", *interval, config.MinLagInterval)
		return exitUsage
	}
	cfg, code := loadConfig(lagCmd, *path, stderr)
	if code != exitOK {
		return code
	}
	targets, err := metricsTargets(cfg, metricsFlags)
	if err != nil {
		fmt.Fprintf(stderr, "kretry lag: %v\n", err)
		return exitUsage
	}

	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	m, closeMonitor, code := newLagMonitor(ctx, cfg, log, stderr)
	if code != exitOK {
		return code
	}
	defer closeMonitor()
	r := &lagRun{m: m, sig: &signals{cfg: cfg, targets: targets, prevInst: map[string]*lag.Instance{}, timeout: m.Config().Timeout},
		stdout: stdout, stderr: stderr, asJSON: *asJSON, watch: *watch, path: *path}
	r.clearScreen = *watch && !*asJSON && isTerminal(stdout)
	t := time.NewTicker(*interval)
	defer t.Stop()
	for n := 0; ; n++ {
		code, done := r.scan(ctx, n)
		if done {
			return code
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-t.C:
		}
	}
}

// newLagMonitor connects to cfg's brokers and builds the lag monitor of
// cfg; close it with the returned func. The code is exitOK, or what the
// command exits with.
func newLagMonitor(ctx context.Context, cfg *config.Config, log *slog.Logger, stderr io.Writer) (*lag.Monitor, func(), int) {
	kc, err := sidecar.CommandClients(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "kretry lag: %v\n", err)
		return nil, nil, exitUsage
	}
	if err := kc.Ping(ctx); err != nil {
		fmt.Fprintf(stderr, "kretry lag: %v\n", err)
		return nil, nil, exitFail
	}
	cl, err := kc.New()
	if err != nil {
		fmt.Fprintf(stderr, "kretry lag: %v\n", err)
		return nil, nil, exitFail
	}
	m, err := lag.New(cl, lag.FromConfig(cfg), lag.WithLogger(log))
	if err != nil {
		cl.Close()
		fmt.Fprintf(stderr, "kretry lag: %v\n", err)
		return nil, nil, exitFail
	}
	return m, func() { m.Close(); cl.Close() }, exitOK
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// lagRun is one `kretry lag` command: its monitor, flags and outputs.
type lagRun struct {
	m              *lag.Monitor
	sig            *signals
	stdout, stderr io.Writer
	asJSON, watch  bool
	clearScreen    bool
	path           string // the config file, for the hints
}

// scan runs scan n (0-based) and prints it; done when the command ends,
// with its exit code.
func (r *lagRun) scan(ctx context.Context, n int) (code int, done bool) {
	snap, err := r.m.Scan(ctx)
	if ctx.Err() != nil {
		return exitOK, true
	}
	if problems := r.sig.read(ctx, snap); len(problems) > 0 {
		snap.Errors = append(snap.Errors, problems...)
		err = errors.Join(err, errors.New(strings.Join(problems, "; ")))
	}
	switch {
	case r.asJSON:
		b, jerr := json.Marshal(snap)
		if jerr == nil {
			b, jerr = r.sig.appendJSON(b)
		}
		if jerr != nil {
			fmt.Fprintf(r.stderr, "kretry lag: %v\n", jerr)
			return exitFail, true
		}
		fmt.Fprintf(r.stdout, "%s\n", b)
	default:
		if r.clearScreen {
			fmt.Fprint(r.stdout, "\x1b[H\x1b[2J")
		} else if n > 0 {
			fmt.Fprintln(r.stdout)
		}
		printLag(r.stdout, snap, r.m.Config().Window, n+1, r.watch, r.sig, r.path)
	}
	if r.watch {
		return exitOK, false
	}
	if err != nil {
		// The problems are in the output already (Problems, or the JSON
		// errors field): name them, do not repeat them.
		where := "listed under Problems above"
		if r.asJSON {
			where = `in the JSON "errors" field`
		}
		fmt.Fprintf(r.stderr, "kretry lag: incomplete scan: %d problem(s), %s\n", len(snap.Errors), where)
		return exitFail, true
	}
	return exitOK, true
}

// printLag writes a snapshot as tables: the groups, their partitions, the
// dead-letter topics and the problems of the scan.
// printLag prints one scan; path is the config file lag read, which the
// hint to `kretry dlq stats` names so that it can be pasted as printed.
func printLag(w io.Writer, s *lag.Snapshot, window, scans int, watch bool, sig *signals, path string) {
	fmt.Fprintf(w, "kretry lag — %s, scan took %s", s.Time.UTC().Format(time.RFC3339), s.Duration.Round(time.Millisecond))
	switch {
	case !watch:
		fmt.Fprintf(w, "; one scan: the status needs %d (--watch), until then a partition with lag shows -\n", window)
	case scans < window:
		fmt.Fprintf(w, "; scan %d of the %d the status needs (a partition with lag shows - until then)\n", scans, window)
	default:
		fmt.Fprintln(w)
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	printGroups(tw, s.Groups)
	if len(s.Rows) > 0 {
		printRows(tw, s.Rows, scans >= window)
	}
	if len(s.DLQ) > 0 {
		printDLQ(w, tw, s.DLQ, path)
	}
	sig.print(w)
	if len(s.Errors) > 0 {
		fmt.Fprintln(w, "\nProblems:")
		for _, e := range s.Errors {
			fmt.Fprintln(w, "  "+e)
		}
	}
}

// printGroups writes to tw the table of the consumer groups: state,
// members, status and error.
func printGroups(tw *tabwriter.Writer, groups []lag.GroupInfo) {
	fmt.Fprintln(tw, "\nGROUP\tSTATE\tMEMBERS\tSTATUS\tERROR")
	for _, g := range groups {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", g.Name, orDash(g.State), g.Members, g.Status, g.Error)
	}
	tw.Flush()
}

// printRows writes to tw the table of the groups' partitions: offsets,
// lag (records), age and status. Before the status has its scans
// (judged false), a partition with lag has no verdict yet: its STATUS is
// "-", not the OK the evaluation gives it (lag.Evaluate, rule 3). A topic
// that a kretry group committed on but that is none of its config's
// stages (a tier removed from retry.tiers) is said to be consumed by
// nothing.
func printRows(tw *tabwriter.Writer, rows []lag.Row, judged bool) {
	kretry := map[string]bool{}
	for _, r := range rows {
		kretry[r.Group] = kretry[r.Group] || r.Stage != ""
	}
	fmt.Fprintln(tw, "\nGROUP\tTOPIC\tPARTITION\tSTAGE\tCOMMITTED\tLOG START\tEND\tLAG\tAGE\tSTATUS\tNOTE")
	for _, r := range rows {
		committed := "-"
		if r.Committed >= 0 {
			committed = fmt.Sprint(r.Committed)
		}
		status := r.Status.String()
		if !judged && r.Status == lag.StatusOK && r.Lag > 0 && r.Error == "" {
			status = "-"
		}
		n := note(r, r.Stage == "" && kretry[r.Group])
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Group, r.Topic, r.Partition, orDash(r.Stage),
			committed, offset(r.LogStart, r.Error), offset(r.End, r.Error), offset(r.Lag, r.Error), age(r), status, n)
	}
	tw.Flush()
}

// printDLQ writes to tw the table of the DLQ partitions (rows, at least
// one), then to w what its OFFSETS count and the command that counts the
// records still waiting (with -c path when path is set).
func printDLQ(w io.Writer, tw *tabwriter.Writer, rows []lag.Row, path string) {
	fmt.Fprintln(tw, "\nDLQ\tPARTITION\tSOURCE\tFROM\tEND\tOFFSETS\tAGE\tNOTE")
	source := rows[0].Source
	for _, r := range rows {
		if r.Source != source {
			source = "SOURCE"
		}
		from := "log start"
		if r.Group != "" && r.Committed >= 0 {
			from = fmt.Sprintf("%s@%d", r.Group, r.Committed)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Topic, r.Partition, r.Source, from,
			offset(r.End, r.Error), offset(r.Lag, r.Error), age(r), r.Error)
	}
	tw.Flush()
	// Counting the records still waiting means reading the DLQ and its
	// marks: too much for a lag scan, so say where that count is.
	cfgArg := ""
	if path != "" {
		cfgArg = " -c " + shellWord(path)
	}
	fmt.Fprintf(w, "OFFSETS run from FROM to END: records already redriven or discarded and transaction markers included;\nthe records still waiting: kretry dlq stats%s --topic %s\n", cfgArg, source)
}

// shellWord is s as one word a POSIX shell reads back as s: as it is when
// it has no character the shell treats specially, else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+@%,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func offset(n int64, err string) string {
	if err != "" || n < 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func age(r lag.Row) string {
	if r.Error != "" || !r.AgeKnown {
		return "-"
	}
	if r.Age < time.Second {
		return r.Age.Round(time.Millisecond).String()
	}
	return r.Age.Round(time.Second).String()
}

func note(r lag.Row, unstaged bool) string {
	n := []string{r.Error} // an error says all there is to say of the offsets
	if r.Error == "" {
		n = n[:0]
		for _, f := range []struct {
			on   bool
			text string
		}{
			{r.NoCommit, "no commit (from log start)"},
			{r.Clamped, "commit below log start"},
			{r.PastEnd, "commit past end"},
			{r.MarkersOnly, "only transaction markers left"},
			{r.DoneAhead > 0, fmt.Sprintf("%d past the commit done (not lag)", r.DoneAhead)},
		} {
			if f.on {
				n = append(n, f.text)
			}
		}
	}
	if unstaged {
		n = append(n, "not a stage of the config: nothing consumes it (a tier removed from retry.tiers?)")
	}
	return strings.Join(n, ", ")
}

// duration is a flag.Value for a time.Duration whose parse error says what
// to write, as the config's errors do (the flag package's own says only
// "parse error").
type duration time.Duration

func (d *duration) String() string { return time.Duration(*d).String() }

func (d *duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if h, ok := config.DaysInHours(s); ok {
			return fmt.Errorf("not a duration: a Go duration has no day unit, write %q", h)
		}
		return errors.New(`not a duration: use a Go duration such as "5s"`)
	}
	*d = duration(v)
	return nil
}

// durationFlag defines a duration flag on fs, as fs.Duration does.
func durationFlag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := &value
	fs.Var((*duration)(p), name, usage)
	return p
}
