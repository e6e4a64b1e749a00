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
		if want := numberWant(f, value, reason); want != "" {
			reason = "want " + want
		}
	}
	return fmt.Sprintf("invalid value %s for --%s: %s", value, name, reason)
}

// numberWant says what a number or bool flag takes, given the value (as
// quoted in the error) and the flag package's reason for refusing it; ""
// for other flags. Out of range, it names the bound the value is past, not
// the whole range of int64: the flag's own check names its own bounds once
// the value parses (--limit -1: "want 0 (all) or more").
func numberWant(f *flag.Flag, value, reason string) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return ""
	}
	out := reason == "value out of range"
	switch g.Get().(type) {
	case int, int64:
		if out && strings.HasPrefix(strings.Trim(value, `"`), "-") {
			return fmt.Sprintf("a whole number no smaller than %d", math.MinInt64)
		}
		if out {
			return fmt.Sprintf("a whole number no larger than %d", math.MaxInt64)
		}
		return "a whole number, such as " + f.DefValue
	case uint, uint64:
		if out {
			return fmt.Sprintf("a whole number no larger than %d", uint64(math.MaxUint64))
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
// missingSubcommand is the line before parent's help when it was run with
// no subcommand: names are its subcommands.
func missingSubcommand(parent string, names []string) string {
	return fmt.Sprintf("kretry %s: a subcommand is required: %s or %s\n\n", parent, strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

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
