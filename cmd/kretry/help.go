package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"strings"

	"github.com/kretry/kretry/pkg/config"
)

// command documents one subcommand: what `kretry CMD -h`, `kretry help
// CMD` and the top-level usage print about it.
type command struct {
	name     string // as typed after "kretry": "run", "parking release"
	synopsis string // the usage line after "kretry ", every flag in it
	purpose  string // one line
	about    string // optional paragraphs, wrapped by hand
	example  string // one command per line
	// short maps a long flag to its one-letter alias, printed together
	// ("-c, --config FILE").
	short map[string]string
}

var (
	runCmd = &command{
		name:     "run",
		synopsis: "run -c FILE",
		purpose:  "run the sidecar until SIGTERM/SIGINT",
		about: `Consumes every topics[] entry of the config, delivers each record to
app.url and moves failures through the retry tiers, parking and the DLQ.
With kafka.brokers [embedded] it runs the embedded broker too, on
embedded.listen with its log in embedded.data_dir (locked: one process
per data dir). On SIGTERM/SIGINT it stops starting deliveries, waits up to
app.timeout for those in flight, commits and exits 0; a second signal
exits at once (status 1) without waiting.`,
		example: "kretry run -c config.yaml\nKRETRY_KAFKA__BROKERS=127.0.0.1:9092 kretry run -c config.yaml",
		short:   map[string]string{"config": "c"},
	}
	demoCmd = &command{
		name:     "demo",
		synopsis: "demo [--records N] [--json] [--quiet]",
		purpose:  "the whole job on an embedded broker, with a sample app that fails on purpose",
		about: `Starts an in-memory embedded broker, a sample HTTP app that fails some
records on purpose, produces keyed order records, runs the sidecar with
short tiers and reports what became of every record. The exit status is 0
only when nothing was lost, duplicated in the DLQ or delivered out of
order.`,
		example: "kretry demo\nkretry demo --records 500 --json --quiet",
	}
	brokerCmd = &command{
		name:     "broker",
		synopsis: "broker [--listen ADDR] [--data-dir DIR] [--partitions N]",
		purpose:  "run the embedded Kafka-protocol broker alone, for kcat and your app",
		about: `Serves the Kafka protocol (franz-go's kfake) until SIGTERM/SIGINT. The
data dir is locked: a second broker or ` + "`kretry run`" + ` on it is refused. For
development and demos, not production data.`,
		example: "kretry broker --listen 127.0.0.1:9092 --data-dir .kretry/data",
	}
	validateCmd = &command{
		name:     "validate",
		synopsis: "validate -c FILE",
		purpose:  "check a config and exit: 0 when valid, 2 with every error found",
		about: `Loads the file with the KRETRY_ environment overrides applied, as
` + "`kretry run`" + ` would, and prints every problem with its key path and value.
Warnings (a group or topic name that looks like another topic's default,
left over from a rename) go to stderr and do not change the exit status.`,
		example: "kretry validate -c config.yaml",
		short:   map[string]string{"config": "c"},
	}
	lagCmd = &command{
		name:     "lag",
		synopsis: "lag -c FILE [--json] [--watch [--interval DURATION]] [--metrics URL]…",
		purpose:  "print the consumer lag, age and status of kretry's groups and DLQs, and each pipeline's overload signals",
		about: `Needs the brokers of the config: with kafka.brokers [embedded] it dials
embedded.listen, where ` + "`kretry run`" + ` or ` + "`kretry broker`" + ` must be running.
The status (OK, WARN, STALL, STOP, ERR) needs lag.window scans, and the
enqueue, drain, tier and DLQ rates two scans: use --watch. The breaker,
in-flight limit, retry share, budget and top failures come from a running
instance's /metrics (metrics.listen, or --metrics URL).
One scan exits 1 when it could not measure everything.`,
		example: "kretry lag -c config.yaml\nkretry lag -c config.yaml --watch --interval 10s --metrics 10.0.0.7:9464",
		short:   map[string]string{"config": "c"},
	}
	parkingCmd = &command{
		name:     "parking",
		synopsis: "parking list|release -c FILE --topic TOPIC …",
		purpose:  "operator actions on parking topics",
		about: `Subcommands:
  list      the keys parked or blocked, with their state (held ones wait for release)
  release   release a key held in parking (on_dead_letter: hold)

Run 'kretry parking list -h' or 'kretry parking release -h' for their flags.`,
		example: "kretry parking list -c config.yaml --topic orders --held",
	}
	parkingListCmd = &command{
		name:     "parking list",
		synopsis: "parking list -c FILE --topic TOPIC [--held] [--json]",
		purpose:  "list the keys parked or blocked, with their state",
		about: `Reads the topic's parking topic past its group's committed offsets, as
the partition's owner replays it on assignment, and prints each key that
is not idle: its partition, state (blocked: a record of the key is still
in a retry tier, its HEAD; held: that record was dead-lettered under
on_dead_letter: hold and the parked records wait for kretry parking
release; releasing: they are being delivered; dead-lettering: they
follow it to the DLQ), and how many records are parked. It needs the
brokers: with kafka.brokers [embedded] it dials embedded.listen, where
` + "`kretry run`" + ` or ` + "`kretry broker`" + ` must be running.`,
		example: "kretry parking list -c config.yaml --topic orders --held",
		short:   map[string]string{"config": "c"},
	}
	parkingReleaseCmd = &command{
		name:     "parking release",
		synopsis: "parking release -c FILE --topic TOPIC (--key KEY | --key-hex HEX) [--partition N]",
		purpose:  "release a key held in parking (on_dead_letter: hold)",
		about: `Writes a release op for the key to the topic's parking topic; the
instance that owns that partition then delivers the key's parked records
in order. It finds the parking partition(s) where the key is parked
(producers do not agree on the key hash; --partition narrows it to one)
and writes only where the key is held: a key whose record is still in a
retry tier, whose parked records are already being released or go to the
DLQ, or that is parked nowhere exits 1 with the reason, nothing written
(kretry parking list shows each key's state). A --partition the parking
topic does not have exits 2; one where the key is found nowhere gets the
release anyway, said so. It needs the brokers: with kafka.brokers
[embedded] it dials embedded.listen, where ` + "`kretry run`" + ` or ` + "`kretry broker`" + `
must be running.`,
		example: "kretry parking release -c config.yaml --topic orders --key customer-42",
		short:   map[string]string{"config": "c"},
	}
	dlqCmd = &command{
		name:     "dlq",
		synopsis: "dlq list|show|stats|redrive|discard -c FILE --topic TOPIC …",
		purpose:  "inspect a DLQ, redrive its records into the pipeline or discard them",
		about: `Subcommands:
  list      the records waiting in the DLQ (or redriven, discarded), filtered
  show      one record: every header and the value
  stats     counts by error class, status and error fingerprint, oldest age
  redrive   move records back into kretry's pipeline, exactly once, paced
  discard   mark records handled without delivering them (kept for audit)

Run 'kretry dlq SUBCOMMAND -h' for its flags. docs/DLQ.md describes the
marks topic, the lease and what the app sees.`,
		example: "kretry dlq list -c config.yaml --topic orders --class permanent",
	}
	dlqListCmd = &command{
		name:     "dlq list",
		synopsis: "dlq list -c FILE --topic TOPIC [--state STATE] [--class CLASSES] [--status STATUSES] [--since TIME] [--until TIME] [--key KEY] [--header K=V] [--grep TEXT] [--record P/O] [--limit N] [--newest] [--json]",
		purpose:  "list the records of a DLQ, waiting ones by default",
		about: `Reads the DLQ and its marks topic (<dlq>.marks) to their last stable
offsets. Filters combine (all must match). Keys and messages that are not
printable text are shown in hex.`,
		example: "kretry dlq list -c config.yaml --topic orders --status 422 --since 2h",
		short:   map[string]string{"config": "c"},
	}
	dlqShowCmd = &command{
		name:     "dlq show",
		synopsis: "dlq show -c FILE --topic TOPIC (--record P/O | [--partition N] --offset N) [--json]",
		purpose:  "print one DLQ record: every header and the value",
		about:    `Text (valid UTF-8 without control characters other than tab, newline and CR) is printed as is, anything else in hex (--json and the admin API: base64).`,
		example:  "kretry dlq show -c config.yaml --topic orders --record 1/42",
		short:    map[string]string{"config": "c"},
	}
	dlqStatsCmd = &command{
		name:     "dlq stats",
		synopsis: "dlq stats -c FILE --topic TOPIC [--json]",
		purpose:  "what is in a DLQ at a glance: counts by class, status, fingerprint; oldest age",
		example:  "kretry dlq stats -c config.yaml --topic orders",
		short:    map[string]string{"config": "c"},
	}
	dlqRedriveCmd = &command{
		name:     "dlq redrive",
		synopsis: "dlq redrive -c FILE --topic TOPIC [--class CLASSES] [--status STATUSES] [--since TIME] [--until TIME] [--key KEY] [--header K=V] [--grep TEXT] [--record P/O] [--limit N] [--rate N] [--dry-run] [--by NAME] [--quiet] [--json]",
		purpose:  "move waiting DLQ records back into kretry's pipeline, exactly once",
		about: `Each selected waiting record goes onto the topic's first retry tier, due
at once, and the app sees it again with its original ce-id, key, value and
headers, ce-attempt 1 and kretry-redrive-count / kretry-redrive-id. The
copy and the record's mark commit in one transaction: Ctrl-C stops cleanly
with the count so far, and the same command again continues without
moving anything twice. A second redrive or discard of the same DLQ while
one runs is refused, naming it. Records without readable kretry headers
are refused with the reason (exit 1); discard them instead.`,
		example: "kretry dlq redrive -c config.yaml --topic orders --class permanent --status 422 --rate 5 --dry-run",
		short:   map[string]string{"config": "c"},
	}
	dlqDiscardCmd = &command{
		name:     "dlq discard",
		synopsis: "dlq discard -c FILE --topic TOPIC --reason TEXT [--class CLASSES] [--status STATUSES] [--since TIME] [--until TIME] [--key KEY] [--header K=V] [--grep TEXT] [--record P/O] [--limit N] [--rate N] [--dry-run] [--by NAME] [--quiet] [--json]",
		purpose:  "mark waiting DLQ records handled without delivering them",
		about: `Writes a mark per record (who, when, the reason) to the marks topic; the
records stay in the DLQ for audit and no longer count as waiting.`,
		example: "kretry dlq discard -c config.yaml --topic orders --grep 'unknown customer' --reason 'customers deleted (TICKET-12)'",
		short:   map[string]string{"config": "c"},
	}
	versionCmd = &command{
		name:     "version",
		synopsis: "version",
		purpose:  "print the kretry version and the Go version it was built with",
		example:  "kretry version",
	}
	helpCmd = &command{
		name:     "help",
		synopsis: "help [COMMAND]",
		purpose:  "print this help, or a command's",
		example:  "kretry help run\nkretry run -h",
	}
)

// commands in the order of the top-level usage.
var commands = []*command{runCmd, demoCmd, gamedayCmd, brokerCmd, validateCmd, lagCmd, parkingListCmd, parkingReleaseCmd,
	dlqListCmd, dlqShowCmd, dlqStatsCmd, dlqRedriveCmd, dlqDiscardCmd, versionCmd, helpCmd}

// dlqSubcommands are the subcommands of `kretry dlq`.
var dlqSubcommands = map[string]*command{"list": dlqListCmd, "show": dlqShowCmd, "stats": dlqStatsCmd, "redrive": dlqRedriveCmd, "discard": dlqDiscardCmd}

// topUsage is the top-level help: one line per command with its synopsis.
func topUsage() string {
	var b strings.Builder
	b.WriteString("kretry — Kafka retry-topic and dead-letter sidecar\n\nUsage:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  kretry %s\n        %s\n", c.synopsis, c.purpose)
	}
	fmt.Fprintf(&b, `
Run 'kretry help COMMAND' or 'kretry COMMAND -h' for a command's flags,
with their units and defaults, and an example.

The config path may also come from %s. Every config key can be
overridden from the environment (KRETRY_APP__URL=…); see README.md.

Exit status: 0 success, 1 a runtime failure (a broker that cannot be
reached, a demo that lost records or gave up waiting, an incomplete lag
scan), 2 bad flags or a bad config.
`, config.EnvConfigFile)
	return b.String()
}

// flagSet returns the command's flag set. Parse errors go to stderr; help
// is printed by parse, so Usage does nothing.
func (c *command) flagSet(stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("kretry "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parse prints what is wrong, in kretry's words
	fs.Usage = func() {}
	return fs
}

// parse parses args into fs. done reports that the command must stop
// with the returned status: -h/--help printed the help on stdout (0), or
// the flags were wrong (2). No command takes positional arguments.
func (c *command) parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, done bool) {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		c.help(stdout, fs)
		return exitOK, true
	case err != nil:
		fmt.Fprintf(stderr, "kretry %s: %s\nRun 'kretry %s -h' for help.\n", c.name, flagError(fs, err), c.name)
		return exitUsage, true
	case fs.NArg() > 0:
		hint := ""
		if fs.Lookup("c") != nil && (strings.HasSuffix(fs.Arg(0), ".yaml") || strings.HasSuffix(fs.Arg(0), ".yml")) {
			hint = fmt.Sprintf(" (a config file is given with -c: kretry %s -c %s)", c.name, fs.Arg(0))
		}
		fmt.Fprintf(stderr, "kretry %s: unexpected argument %q%s\nRun 'kretry %s -h' for help.\n", c.name, fs.Arg(0), hint, c.name)
		return exitUsage, true
	}
	return exitOK, false
}

// flagError says what err, from parsing fs, found wrong: an unknown flag
// with the nearest defined one, or a value the flag cannot take.
func flagError(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return valueFlagError(fs, err)
	}
	name = strings.TrimLeft(name, "-")
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	msg := "unknown flag --" + name
	if m := config.Closest(name, names); m != "" {
		msg += ", did you mean --" + m + "?"
	}
	return msg
}

// valueFlagError rewrites the flag package's "invalid value "x" for flag
// -n: reason" as "invalid value "x" for --n: …", the flag named as the
// help spells it. A number or bool flag's "parse error" or "value out of
// range" becomes what the flag wants; a flag.Value's own reason is kept.
// Other errors keep the flag package's words.
func valueFlagError(fs *flag.FlagSet, err error) string {
	m := flagValueError.FindStringSubmatch(err.Error())
	if m == nil {
		return err.Error()
	}
	value, name, reason := m[1], m[2], m[3]
	if f := fs.Lookup(name); f != nil && (reason == "parse error" || reason == "value out of range") {
		if want := numberWant(f, reason); want != "" {
			reason = "want " + want
		}
	}
	return fmt.Sprintf("invalid value %s for --%s: %s", value, name, reason)
}

// numberWant says what a number or bool flag takes, given the flag
// package's reason for refusing a value; "" for other flags.
func numberWant(f *flag.Flag, reason string) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	out := reason == "value out of range"
	switch g.Get().(type) {
	case int, int64:
		if out {
			return fmt.Sprintf("a whole number from %d to %d", math.MinInt64, math.MaxInt64)
		}
		return "a whole number, such as " + f.DefValue
	case uint, uint64:
		if out {
			return fmt.Sprintf("a whole number from 0 to %d", uint64(math.MaxUint64))
		}
		return "a whole number, such as " + f.DefValue
	case float64:
		if out {
			return fmt.Sprintf("a number no larger than %g", math.MaxFloat64)
		}
		return "a number, such as " + f.DefValue
	case bool:
		return "true or false"
	}
	return ""
}

// flagValueError matches the flag package's error for a value a flag
// refuses: the quoted value, the flag's name and the reason.
var flagValueError = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.+)$`)

// help prints the command's purpose, usage, flags and example.
func (c *command) help(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "kretry %s — %s\n\nUsage:\n  kretry %s\n", c.name, c.purpose, c.synopsis)
	if c.about != "" {
		fmt.Fprintf(w, "\n%s\n", c.about)
	}
	if fs != nil {
		c.printFlags(w, fs)
	}
	fmt.Fprintf(w, "\nExample:\n  %s\n", strings.ReplaceAll(c.example, "\n", "\n  "))
}

// printFlags lists the flags with their placeholders and defaults, the
// text wrapped at 80 columns. A flag whose usage already says "default"
// gets no "(default …)" of its own.
func (c *command) printFlags(w io.Writer, fs *flag.FlagSet) {
	alias := map[string]bool{}
	for _, s := range c.short {
		alias[s] = true
	}
	type row struct{ names, usage string }
	var rows []row
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		if alias[f.Name] {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		names := "    --" + f.Name
		if s, ok := c.short[f.Name]; ok {
			names = "-" + s + ", --" + f.Name
		}
		if name != "" {
			names += " " + name
		}
		if !strings.Contains(usage, "default") && f.DefValue != "" && f.DefValue != "false" {
			usage += " (default " + f.DefValue + ")"
		}
		rows = append(rows, row{names, usage})
		width = max(width, len(names))
	})
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	for _, r := range rows {
		pad := strings.Repeat(" ", 2+width+2)
		lines := wrap(r.usage, max(80-len(pad), 30))
		fmt.Fprintf(w, "  %-*s  %s\n", width, r.names, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%s%s\n", pad, l)
		}
	}
}

// wrap breaks s into lines of at most n bytes at spaces (a longer word
// stands alone).
func wrap(s string, n int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= n:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

// configFlag defines -c and its alias --config.
func configFlag(fs *flag.FlagSet) *string {
	path := fs.String("config", os.Getenv(config.EnvConfigFile), "YAML config `FILE`; default $"+config.EnvConfigFile)
	fs.StringVar(path, "c", *path, "")
	return path
}

// cmdHelp is `kretry help [COMMAND …]`.
func cmdHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, topUsage())
		return exitOK
	}
	switch strings.Join(args, " ") {
	case "run", "demo", "gameday", "broker", "validate", "lag", "parking", "parking release", "version",
		"dlq", "dlq list", "dlq show", "dlq stats", "dlq redrive", "dlq discard":
		return run(ctx, append(args, "-h"), stdout, stderr)
	case "help", "-h", "-help", "--help":
		helpCmd.help(stdout, nil)
		return exitOK
	}
	fmt.Fprintf(stderr, "kretry help: unknown command %q\n\n%s", strings.Join(args, " "), topUsage())
	return exitUsage
}

// likelyMeant maps words users type for a command to kretry's name for it.
var likelyMeant = map[string]string{
	"check": "validate", "verify": "validate", "lint": "validate", "config": "validate",
	"start": "run", "serve": "run", "sidecar": "run",
	"status": "lag", "monitor": "lag", "offsets": "lag",
	"release": "parking release", "redrive": "dlq redrive", "replay": "dlq redrive",
}

// unknownSubcommand is the usage error of `kretry <parent> <sub>` for a
// sub that is none of names, naming the nearest one.
func unknownSubcommand(parent, sub string, names []string) string {
	hint := ""
	if m := config.Closest(sub, names); m != "" {
		hint = fmt.Sprintf(" (did you mean 'kretry %s %s'?)", parent, m)
	}
	return fmt.Sprintf("kretry %s: unknown subcommand %q%s\nRun 'kretry %s -h' for help.\n", parent, sub, hint, parent)
}

// didYouMean suggests the command cmd was probably meant to be: a word
// users type for it (likelyMeant) or a command name within two edits; ""
// when none is close.
func didYouMean(cmd string) string {
	if m, ok := likelyMeant[strings.ToLower(cmd)]; ok {
		return fmt.Sprintf(" (did you mean 'kretry %s'?)", m)
	}
	for _, name := range []string{"run", "demo", "gameday", "broker", "validate", "lag", "parking", "dlq", "version", "help"} {
		if d := config.EditDistance(strings.ToLower(cmd), name); d <= 2 && len(cmd) > 2 || d == 1 && len(cmd) == 2 {
			return fmt.Sprintf(" (did you mean 'kretry %s'?)", name)
		}
	}
	return ""
}
