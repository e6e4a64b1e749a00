package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/kretry/kretry/lag"
)

// subcommands are every command a user can type, with the flag lines
// their help must show (placeholder, units, default).
var subcommands = []struct {
	args  []string
	flags []string
}{
	{[]string{"run"}, []string{"-c, --config FILE"}},
	{[]string{"demo"}, []string{"--records N", "(default 2000)", "--json", "--quiet"}},
	{[]string{"gameday"}, []string{"--quick", "--brokers HOST:PORT", "--chart FILE", "(default gameday.html)", "--json", "--peers LIST", "(default kretry,blocking)", "--quiet"}},
	{[]string{"broker"}, []string{"--listen ADDR", "(default 127.0.0.1:9092)", "--data-dir DIR", "(default .kretry/data)", "--partitions N", "(default 3)"}},
	{[]string{"validate"}, []string{"-c, --config FILE"}},
	{[]string{"lag"}, []string{"-c, --config FILE", "--json", "--watch", "--interval DURATION", "(default 5s)"}},
	{[]string{"parking"}, nil},
	{[]string{"parking", "release"}, []string{"-c, --config FILE", "--topic TOPIC", "--key KEY", "--partition N"}},
	{[]string{"dlq"}, nil},
	{[]string{"dlq", "list"}, []string{"-c, --config FILE", "--topic TOPIC", "--class CLASSES", "--since TIME", "--header K=V", "--record P/O", "--state STATE", "--json"}},
	{[]string{"dlq", "show"}, []string{"-c, --config FILE", "--topic TOPIC", "--partition N", "--offset N"}},
	{[]string{"dlq", "stats"}, []string{"-c, --config FILE", "--topic TOPIC", "--json"}},
	{[]string{"dlq", "redrive"}, []string{"-c, --config FILE", "--rate N", "(default 10)", "--dry-run", "--limit N", "--by NAME"}},
	{[]string{"dlq", "discard"}, []string{"--reason TEXT", "--rate N", "--dry-run"}},
	{[]string{"version"}, nil},
	{[]string{"help"}, nil},
}

var flagLine = regexp.MustCompile(`^  (?:-\w, )?\s*--([\w-]+)`)

// helpFlags returns the long flag names listed under "Flags:".
func helpFlags(help string) []string {
	_, list, ok := strings.Cut(help, "\nFlags:\n")
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, "\n\n")
	var names []string
	for _, l := range strings.Split(list, "\n") {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

// TestSubcommandHelp: `CMD -h`, `CMD --help` and `help CMD` all exit 0
// and print the same help on stdout: a one-line purpose, the usage, the
// flags with their defaults, an example.
func TestSubcommandHelp(t *testing.T) {
	top := topUsage()
	for _, sc := range subcommands {
		name := strings.Join(sc.args, " ")
		t.Run(name, func(t *testing.T) {
			var first string
			for _, args := range [][]string{
				append(append([]string{}, sc.args...), "-h"),
				append(append([]string{}, sc.args...), "--help"),
				append([]string{"help"}, sc.args...),
			} {
				var out, errb bytes.Buffer
				code := run(context.Background(), args, &out, &errb)
				if code != exitOK {
					t.Errorf("kretry %s: exit %d, want 0 (stderr %q)", strings.Join(args, " "), code, errb.String())
				}
				if errb.Len() > 0 {
					t.Errorf("kretry %s: stderr %q, want nothing", strings.Join(args, " "), errb.String())
				}
				if first == "" {
					first = out.String()
				} else if out.String() != first {
					t.Errorf("kretry %s prints another help than kretry %s -h:\n%s", strings.Join(args, " "), name, out.String())
				}
			}
			help := first
			head, _, _ := strings.Cut(help, "\n")
			if !strings.HasPrefix(head, "kretry "+name+" — ") || len(head) < len("kretry "+name+" — ")+10 {
				t.Errorf("first line %q is not `kretry %s — <purpose>`", head, name)
			}
			if !strings.Contains(help, "\nUsage:\n  kretry "+name) {
				t.Errorf("no usage line")
			}
			if !strings.Contains(help, "\nExample:\n  kretry "+name) {
				t.Errorf("no example")
			}
			for _, f := range sc.flags {
				if !strings.Contains(help, f) {
					t.Errorf("help lacks %q", f)
				}
			}
			if strings.Count(help, "default") > 0 && regexp.MustCompile(`default[^\n]*\(default`).MatchString(help) {
				t.Errorf("a flag states its default twice")
			}
			// Every flag of the command is in the top-level usage, on the
			// command's line.
			for _, f := range helpFlags(help) {
				if !regexp.MustCompile(`(?m)^  kretry `+regexp.QuoteMeta(name)+` .*-`+regexp.QuoteMeta(f)+`\b`).MatchString(top) &&
					!(f == "config" && strings.Contains(top, "kretry "+name+" -c FILE")) {
					t.Errorf("the top-level usage does not show --%s of %s", f, name)
				}
			}
			if t.Failed() {
				t.Logf("help:\n%s", help)
			}
		})
	}
}

// TestLagHelpStatuses: `help lag` names exactly the statuses lag reports.
func TestLagHelpStatuses(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"help", "lag"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var names []string
	for s := lag.StatusOK; s <= lag.StatusErr; s++ {
		names = append(names, s.String())
	}
	if want := "(" + strings.Join(names, ", ") + ")"; !strings.Contains(out.String(), want) {
		t.Errorf("help lag does not list the statuses %s:\n%s", want, out.String())
	}
}

// TestEmbeddedBrokerHelp: the commands that dial the embedded broker say
// that `kretry broker` serves them as well as `kretry run` (README).
func TestEmbeddedBrokerHelp(t *testing.T) {
	for _, cmd := range []string{"lag", "parking release"} {
		var out, errb bytes.Buffer
		run(context.Background(), append([]string{"help"}, strings.Fields(cmd)...), &out, &errb)
		if help := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(help, "`kretry run` or `kretry broker` must be running") {
			t.Errorf("help %s does not name both `kretry run` and `kretry broker`:\n%s", cmd, out.String())
		}
	}
}

func TestTopLevelHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != exitOK || out.String() != topUsage() || errb.Len() > 0 {
			t.Errorf("kretry %s: exit %d, stdout %q, stderr %q; want 0 and the top-level usage", strings.Join(args, " "), code, out.String(), errb.String())
		}
	}
	for _, sc := range subcommands {
		if len(sc.args) == 1 && sc.args[0] != "parking" && !strings.Contains(topUsage(), "\n  kretry "+sc.args[0]) {
			t.Errorf("top-level usage does not list %s", sc.args[0])
		}
	}
}

// TestUsageErrors: bad flags, arguments and commands exit 2 with a hint on
// stderr and nothing on stdout.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--nope"}, "Run 'kretry run -h' for help."},
		{[]string{"demo", "--records", "x"}, "Run 'kretry demo -h' for help."},
		{[]string{"demo", "--recrods", "5"}, "kretry demo: unknown flag --recrods, did you mean --records?\nRun 'kretry demo -h' for help."},
		{[]string{"gameday", "--zzzzzz"}, "kretry gameday: unknown flag --zzzzzz\nRun"},
		{[]string{"lag", "--interval", "x"}, `kretry lag: invalid value "x" for --interval: not a duration`},
		{[]string{"validate", "-c", "x.yaml", "extra"}, `unexpected argument "extra"`},
		{[]string{"broker", "--listen", "9999"}, `kretry broker: --listen "9999": want HOST:PORT, such as 127.0.0.1:9092`},
		{[]string{"validate", "config.yaml"}, `unexpected argument "config.yaml" (a config file is given with -c: kretry validate -c config.yaml)`},
		{[]string{"parking", "release", "-c", "x.yaml", "--topic", "orders"}, "--key KEY (or --key-hex HEX) is required"},
		{[]string{"parking", "hold"}, "kretry parking: unknown subcommand \"hold\"\nRun"},
		{[]string{"parking", "relase"}, `unknown subcommand "relase" (did you mean 'kretry parking release'?)`},
		{[]string{"dlq", "lst"}, `unknown subcommand "lst" (did you mean 'kretry dlq list'?)`},
		{[]string{"demo", "--records", "abc"}, `invalid value "abc" for --records: want a whole number, such as 2000`},
		{[]string{"demo", "--quiet=maybe"}, `invalid value "maybe" for --quiet: want true or false`},
		{[]string{"demo", "--records", "99999999999999999999"}, `invalid value "99999999999999999999" for --records: want a whole number no larger than 9223372036854775807`},
		{[]string{"dlq", "list", "--topic", "orders", "--limit", "-99999999999999999999"}, `invalid value "-99999999999999999999" for --limit: want a whole number no smaller than -9223372036854775808`},
		{[]string{"parking"}, "kretry parking: a subcommand is required: list or release\n\n"},
		{[]string{"parking"}, "Subcommands:"},
		{[]string{"dlq"}, "kretry dlq: a subcommand is required: discard, list, redrive, show or stats\n\n"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{nil, "Usage:"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) || out.Len() > 0 {
			t.Errorf("kretry %s: exit %d, stdout %q, stderr %q; want 2 and %q on stderr", strings.Join(tc.args, " "), code, out.String(), errb.String(), tc.want)
		}
	}
}

// TestConfigAlias: every command that reads a config takes -c and
// --config (and -config).
func TestConfigAlias(t *testing.T) {
	for _, cmd := range [][]string{{"run"}, {"validate"}, {"lag"}, {"parking", "release", "--topic", "orders", "--key", "k"}} {
		for _, flag := range []string{"-c", "-config", "--config"} {
			var out, errb bytes.Buffer
			args := append(append([]string{}, cmd...), flag, "testdata/no-such.yaml")
			code := run(context.Background(), args, &out, &errb)
			if code != exitUsage || !strings.Contains(errb.String(), "invalid config testdata/no-such.yaml") {
				t.Errorf("kretry %s: exit %d, stderr %q; want the config file to be read", strings.Join(args, " "), code, errb.String())
			}
		}
	}
}

// An unknown command names the one it was probably meant to be.
func TestDidYouMean(t *testing.T) {
	for cmd, want := range map[string]string{
		"check": "'kretry validate'", "valdiate": "'kretry validate'", "gamday": "'kretry gameday'",
		"status": "'kretry lag'", "redrive": "'kretry dlq redrive'", "xyzzy": "",
		"vaildaet": "'kretry validate'", // two adjacent swaps: two edits (four by Levenshtein)
		// two letters: one edit
		"rn": "'kretry run'", "lg": "'kretry lag'", "xy": "",
	} {
		got := didYouMean(cmd)
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("didYouMean(%q) = %q, want it to name %s", cmd, got, want)
		}
	}
}
