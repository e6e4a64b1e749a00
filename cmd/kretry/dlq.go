package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/flow"
)

// cmdDLQ is `kretry dlq list|show|stats|redrive|discard`: the DLQ logic is
// package dlq; this file parses flags and prints.
func cmdDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, missingSubcommand("dlq", slices.Sorted(maps.Keys(dlqSubcommands))))
		dlqCmd.help(stderr, nil)
		return exitUsage
	}
	sub, ok := dlqSubcommands[args[0]]
	switch {
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		dlqCmd.help(stdout, nil)
		return exitOK
	case !ok:
		fmt.Fprint(stderr, unknownSubcommand("dlq", args[0], slices.Sorted(maps.Keys(dlqSubcommands))))
		return exitUsage
	}
	f := newDLQFlags(sub, stderr)
	if code, done := sub.parse(f.fs, args[1:], stdout, stderr); done {
		return code
	}
	if err := f.check(); err != nil {
		fmt.Fprintf(stderr, "kretry %s: %v\nRun 'kretry %s -h' for help.\n", sub.name, err, sub.name)
		return exitUsage
	}
	cfg, code := loadConfig(sub, *f.path, stderr)
	if code != exitOK {
		return code
	}
	t, err := dlq.TopicOf(cfg, *f.topic)
	if err != nil {
		fmt.Fprintf(stderr, "kretry %s: %v\n", sub.name, err)
		return exitUsage
	}
	f.dlqTopic = t.DLQ
	log := newLogger(config.Log{Level: "warn", Format: "text"}, stderr)
	// The Kafka client's own warnings (a connection refused while the
	// start check waits for the brokers) are left out, as kretry lag
	// leaves them out: the check's error says what is wrong, and the
	// operations report the failures that matter in their own words.
	kc, err := commandClients(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "kretry %s: %v\n", sub.name, err)
		return exitFail
	}
	c, err := dlq.New(t, kc.Opts(), dlq.WithLogger(log))
	if err != nil {
		fmt.Fprintf(stderr, "kretry %s: %v\n", sub.name, err)
		return exitFail
	}
	defer c.Close()
	return dlqExit(sub, f.runSub(ctx, c, stdout, stderr), stderr)
}

// dlqExit is the exit code of subcommand sub that returned err, saying
// err on stderr: exitUsage when the topic is no DLQ, the record is not
// there or the redrive's tier is not (another config than kretry run's), exitFail for any other error (errRefused has been said already).
func dlqExit(sub *command, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, dlq.ErrNotDLQ), errors.Is(err, dlq.ErrNoRecord), errors.Is(err, dlq.ErrNoTier):
		fmt.Fprintf(stderr, "kretry %s: %v\n", sub.name, err)
		return exitUsage
	case errors.Is(err, errRefused):
		return exitFail
	default:
		fmt.Fprintf(stderr, "kretry %s: %v\n", sub.name, err)
		return exitFail
	}
}

// errRefused: some selected records were refused (already printed).
var errRefused = errors.New("records refused")

// dlqFlags are the flags of one dlq subcommand.
type dlqFlags struct {
	sub                         *command
	fs                          *flag.FlagSet
	path, topic                 *string
	classes, statuses           *string
	since, until, key, grep     *string
	headers, records, states    listFlag
	partition                   *int
	offset, limit               *int64
	rate                        *float64
	dryRun, json, newest, quiet *bool
	reason, by                  *string
	filter                      dlq.Filter
	dlqTopic                    string // the DLQ's name, once resolved
}

func newDLQFlags(sub *command, stderr io.Writer) *dlqFlags {
	f := &dlqFlags{sub: sub, fs: sub.flagSet(stderr)}
	fs := f.fs
	f.path = configFlag(fs)
	f.topic = fs.String("topic", "", "source `TOPIC` (topics[].name) or its DLQ (required)")
	f.json = fs.Bool("json", false, "print JSON instead of text")
	switch sub {
	case dlqShowCmd:
		f.showFlags()
		return f
	case dlqStatsCmd:
		return f
	}
	f.classes = fs.String("class", "", "error `CLASSES`, comma-separated: transient, permanent, exhausted, unreadable")
	f.statuses = fs.String("status", "", "HTTP `STATUSES`, comma-separated; 0 for failures without one")
	f.since = fs.String("since", "", "dead-lettered at or after `TIME` (RFC 3339, or a duration ago: 2h)")
	f.until = fs.String("until", "", "dead-lettered before `TIME` (RFC 3339, or a duration ago)")
	f.key = fs.String("key", "", "record `KEY`, its bytes as given")
	f.grep = fs.String("grep", "", "`TEXT` in the error message (case-insensitive)")
	fs.Var(&f.headers, "header", "original header `K=V` (or K: present), repeatable")
	fs.Var(&f.records, "record", "only DLQ record `P/O` (partition/offset), repeatable or comma-separated")
	f.limit = fs.Int64("limit", 0, "at most `N` records (default 0: all)")
	if sub == dlqListCmd {
		fs.Var(&f.states, "state", "`STATE` waiting, redriven, discarded or all, repeatable or comma-separated (default waiting)")
		f.newest = fs.Bool("newest", false, "newest first (default oldest first)")
		return f
	}
	f.rate = rateFlag(fs)
	dry := "print what would be redriven, move nothing"
	if sub == dlqDiscardCmd {
		dry = "print what would be discarded, discard nothing"
	}
	f.dryRun = fs.Bool("dry-run", false, dry)
	f.quiet = fs.Bool("quiet", false, "no progress bar")
	f.by = fs.String("by", defaultBy(), "`NAME` recorded as who did it (default $USER@host)")
	if sub == dlqDiscardCmd {
		f.reason = fs.String("reason", "", "why the records are not delivered (`TEXT`, kept for audit; required)")
	}
	return f
}

// showFlags defines dlq show's record flags on f.fs: --partition and
// --offset, or --record P/O once.
func (f *dlqFlags) showFlags() {
	fs := f.fs
	f.partition = fs.Int("partition", 0, "DLQ partition `N` of the record")
	off := int64(-1)
	f.offset = &off
	fs.Func("offset", "DLQ offset `N` of the record (required without --record)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("want an offset of 0 or more, as kretry dlq list prints it")
		}
		off = n
		return nil
	})
	named := ""
	fs.Func("record", "DLQ record `P/O` (partition/offset), as kretry dlq list prints it; instead of --partition and --offset", func(v string) error {
		p, o, ok := dlq.ParseRef(v)
		switch {
		case !ok:
			return fmt.Errorf("want <partition>/<offset>, e.g. 0/42, as kretry dlq list prints it")
		case named != "":
			return fmt.Errorf("show prints one record, and --record %s came first (kretry dlq list --record %s,%s lists both)", named, named, v)
		}
		named, *f.partition, off = v, int(p), o
		return nil
	})
}

// rateFlag defines --rate on fs: records/s, dlq.DefaultRate by default,
// 0 for no limit. A value that parses as 0 without being one (1e-400
// underflows) is refused: it must not mean "no limit".
func rateFlag(fs *flag.FlagSet) *float64 {
	rate := float64(dlq.DefaultRate)
	fs.Func("rate", fmt.Sprintf("records/s `N` (default %v); 0 for no limit", dlq.DefaultRate), func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		switch {
		case err != nil:
			return fmt.Errorf("want a number of records/s, such as %v; 0 for no limit", dlq.DefaultRate)
		case v == 0 && strings.Trim(s, "+-0.eE") != "":
			return fmt.Errorf("%s is too small to be told from 0, which means no limit: give at least %g", s, dlq.MinRate)
		}
		rate = v
		return nil
	})
	return &rate
}

// defaultBy is $USER@host.
func defaultBy() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); name == "" && err == nil {
		name = u.Username
	}
	h, _ := os.Hostname()
	return name + "@" + h
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

// runSub runs the parsed subcommand.
func (f *dlqFlags) runSub(ctx context.Context, c *dlq.Client, stdout, stderr io.Writer) error {
	switch f.sub {
	case dlqListCmd, dlqShowCmd, dlqStatsCmd:
		snap, err := c.Read(ctx)
		if err != nil {
			return err
		}
		if snap.MarksOpenFrom >= 0 {
			fmt.Fprintf(stderr, "note: %s has a transaction open since offset %d (a redrive or discard running now, or another producer's left open): records moved in it are listed as waiting until it ends\n",
				dlq.MarksTopic(f.dlqTopic), snap.MarksOpenFrom)
		}
		if err := snap.CheckRecords(f.dlqTopic, f.filter.Records); err != nil {
			return err
		}
		switch f.sub {
		case dlqStatsCmd:
			return printStats(stdout, f.dlqTopic, dlq.StatsOf(snap.Entries), *f.json)
		case dlqShowCmd:
			fl := f.filter
			fl.States = []dlq.State{dlq.Waiting, dlq.Redriven, dlq.Discarded}
			for _, e := range snap.Entries {
				if fl.Match(e) {
					return printShow(stdout, e, *f.json)
				}
			}
			return fmt.Errorf("%w: partition %d offset %d of %s holds no record: a transaction's commit marker (each transaction that wrote to the DLQ leaves one such offset) or a record compaction removed; kretry dlq list --state all prints the offsets of its records",
				dlq.ErrNoRecord, *f.partition, *f.offset, f.dlqTopic)
		}
		return printList(stdout, snap.Entries, &f.filter, int(*f.limit), *f.newest, *f.json)
	}
	action := dlq.ActionRedrive
	req := dlq.Request{Filter: f.filter, Limit: int(*f.limit), Rate: *f.rate, DryRun: *f.dryRun, By: *f.by, Version: flow.Version}
	if f.sub == dlqDiscardCmd {
		action, req.Reason = dlq.ActionDiscard, *f.reason
	}
	req.Action = action
	if req.Rate == 0 {
		req.Rate = -1 // the flag's 0 is "no limit"
	}
	var bar *progressBar
	if !*f.quiet && !*f.json && !*f.dryRun {
		bar = &progressBar{w: stderr}
		req.Progress = bar.update
	}
	res, err := c.Move(ctx, req)
	bar.done()
	if res != nil {
		// Also when it failed midway: what moved before the error.
		printResult(stdout, res, *f.json, req.Limit, err)
	}
	if err != nil {
		return err
	}
	if len(res.Refused) > 0 {
		return errRefused
	}
	return nil
}
