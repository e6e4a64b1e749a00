package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// dlqEnv is an embedded broker with orders, its tier and a DLQ holding
// three kretry records (422, 422, 503-exhausted) and one forged record
// without kretry headers, and a config file pointing at it.
func dlqEnv(t *testing.T) string {
	t.Helper()
	b, cl, _ := testCluster(t, 1, "orders", "orders.dlq", "orders.retry.1m", "orders.parking")
	ctx := context.Background()
	at := time.Now().Add(-time.Hour)
	for i, f := range []retrytopics.Failure{
		{Class: delivery.ClassPermanent, Status: 422, Message: "status 422: unknown customer 17"},
		{Class: delivery.ClassPermanent, Status: 422, Message: "status 422: unknown customer 23"},
		{Class: delivery.ClassExhausted, Status: 503, Message: "retry tiers exhausted; last error: status 503"},
	} {
		f.At = at
		m := retrytopics.Move{Origin: retrytopics.Origin{Topic: "orders", Offset: int64(i), Timestamp: at, Attempts: 1},
			Key: []byte{0xff, byte(i)}, Value: fmt.Appendf(nil, "order-%d", i), Topic: "orders.dlq", Failure: f, Group: "orders-kretry"}
		if err := cl.ProduceSync(ctx, m.Record()).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	forged := &kgo.Record{Topic: "orders.dlq", Key: []byte("forged"), Value: bytes.Repeat([]byte{0}, 1000),
		Headers: []kgo.RecordHeader{{Key: "kretry-attempt", Value: []byte("garbage")}}}
	if err := cl.ProduceSync(ctx, forged).FirstErr(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, fmt.Sprintf(`
embedded: {listen: %q}
app: {url: http://127.0.0.1:8080/kafka}
topics:
  - name: orders
    retry: {tiers: [1m]}
`, b.Addrs()[0]))
	return path
}

func kretry(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDLQCommands(t *testing.T) {
	path := dlqEnv(t)
	code, out, errs := kretry(t, "dlq", "list", "-c", path, "--topic", "orders")
	if code != exitOK || !strings.Contains(out, "4 records") || !strings.Contains(out, "0xff00") || !strings.Contains(out, "unreadable") {
		t.Fatalf("list: exit %d\n%s%s", code, out, errs)
	}
	// A cut list says so, with how many matched (a newcomer read "2
	// records" after --limit 2 as all there were).
	code, out, errs = kretry(t, "dlq", "list", "-c", path, "--topic", "orders", "--newest", "--limit", "2")
	if code != exitOK || !strings.Contains(out, "2 of 4 records (--limit 2)") {
		t.Fatalf("list --limit 2: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = kretry(t, "dlq", "list", "-c", path, "--topic", "orders", "--limit", "4")
	if code != exitOK || !strings.Contains(out, "\n4 records") || strings.Contains(out, "--limit") {
		t.Fatalf("list --limit 4 of 4: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = kretry(t, "dlq", "list", "-c", path, "--topic", "orders.dlq", "--status", "422", "--grep", "CUSTOMER 23", "--json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); code != exitOK || err != nil || len(rows) != 1 || rows[0]["record"] != "0/1" || rows[0]["key_b64"] != "/wE=" {
		t.Fatalf("filtered list: exit %d, %v\n%s", code, err, out)
	}
	code, out, _ = kretry(t, "dlq", "stats", "-c", path, "--topic", "orders")
	if code != exitOK || !strings.Contains(out, "waiting 4") || !strings.Contains(out, "permanent 2") || !strings.Contains(out, "status #: unknown customer #") {
		t.Fatalf("stats: exit %d\n%s", code, out)
	}
	code, out, _ = kretry(t, "dlq", "show", "-c", path, "--topic", "orders", "--offset", "3")
	if code != exitOK || !strings.Contains(out, "kretry headers missing or unreadable") || !strings.Contains(out, "00000000  00 00") {
		t.Fatalf("show forged: exit %d\n%s", code, out)
	}
	// show takes the RECORD column of list as it is printed.
	code, out, errs = kretry(t, "dlq", "show", "-c", path, "--topic", "orders", "--record", "0/1")
	if code != exitOK || !strings.Contains(out, "record     0/1") || !strings.Contains(out, "unknown customer 23") {
		t.Fatalf("show --record: exit %d\n%s%s", code, out, errs)
	}
	code, _, errs = kretry(t, "dlq", "show", "-c", path, "--topic", "orders", "--record", "1")
	if code != exitUsage || !strings.Contains(errs, "<partition>/<offset>") {
		t.Fatalf("show --record 1: exit %d, %s", code, errs)
	}
	for _, tc := range []struct{ args, want string }{
		{"--record 0/1 --partition 1", "give it, or --partition and --offset, not both"},
		{"--offset 1 --record 0/1", "give it, or --partition and --offset, not both"},
		{"--partition -1 --offset 0", "--partition -1: want a partition of 0 or more"},
		{"--record 0/1 --record 0/2", "show prints one record, and --record 0/1 came first"},
	} {
		code, _, errs = kretry(t, append([]string{"dlq", "show", "-c", path, "--topic", "orders"}, strings.Fields(tc.args)...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("show %s: exit %d, %q; want %d and %q", tc.args, code, errs, exitUsage, tc.want)
		}
	}

	// Not a DLQ: a tier, an unknown topic (exit 2, naming what to pass).
	code, _, errs = kretry(t, "dlq", "list", "-c", path, "--topic", "orders.retry.1m")
	if code != exitUsage || !strings.Contains(errs, "retry tier of \"orders\"") || !strings.Contains(errs, "--topic orders") {
		t.Fatalf("tier as DLQ: exit %d, %s", code, errs)
	}
	code, _, errs = kretry(t, "dlq", "redrive", "-c", path, "--topic", "payments")
	if code != exitUsage || !strings.Contains(errs, "not a kretry DLQ") {
		t.Fatalf("unknown topic: exit %d, %s", code, errs)
	}
	code, _, errs = kretry(t, "dlq", "discard", "-c", path, "--topic", "orders")
	if code != exitUsage || !strings.Contains(errs, "--reason") {
		t.Fatalf("discard without reason: exit %d, %s", code, errs)
	}

	// Dry run, then the redrive: the forged record is refused with its reason (exit 1).
	code, out, _ = kretry(t, "dlq", "redrive", "-c", path, "--topic", "orders", "--dry-run")
	if code != exitFail || !strings.Contains(out, "3 records would be redriven") || !strings.Contains(out, "refused partition 0 offset 3: kretry headers missing") {
		t.Fatalf("dry run: exit %d\n%s", code, out)
	}
	code, out, errs = kretry(t, "dlq", "redrive", "-c", path, "--topic", "orders", "--rate", "0", "--by", "tester")
	if code != exitFail || !strings.Contains(out, "selected 4, redriven 3, refused 1 in") || !strings.Contains(out, "refused partition 0 offset 3: kretry headers missing") {
		t.Fatalf("redrive: exit %d\n%s%s", code, out, errs)
	}
	// The forged one is discarded instead; nothing is left waiting.
	code, out, errs = kretry(t, "dlq", "discard", "-c", path, "--topic", "orders", "--class", "unreadable", "--reason", "forged by a test", "--quiet")
	if code != exitOK || !strings.Contains(out, "selected 1, discarded 1, refused 0 in") {
		t.Fatalf("discard: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = kretry(t, "dlq", "stats", "-c", path, "--topic", "orders", "--json")
	var st struct{ Waiting, Redriven, Discarded int }
	if err := json.Unmarshal([]byte(out), &st); code != exitOK || err != nil || st != (struct{ Waiting, Redriven, Discarded int }{0, 3, 1}) {
		// Diagnose a rare miss seen once in CI (stop 17): the discard said
		// "discarded 1" and a stats right after listed its record as waiting.
		_, all, _ := kretry(t, "dlq", "list", "-c", path, "--topic", "orders", "--state", "all", "--json")
		t.Fatalf("stats after: exit %d %v %+v\n%s\ndiscard stderr:\n%s\nlist --state all:\n%s", code, err, st, out, errs, all)
	}
	code, out, _ = kretry(t, "dlq", "stats", "-c", path, "--topic", "orders")
	if want := "nothing is waiting in orders.dlq (4 records: redriven 3, discarded 1)\n"; code != exitOK || out != want {
		t.Fatalf("stats with nothing waiting: exit %d\n%q, want %q", code, out, want)
	}
	code, out, _ = kretry(t, "dlq", "list", "-c", path, "--topic", "orders", "--state", "all")
	if code != exitOK || strings.Count(out, "redriven") != 3 || strings.Count(out, "discarded") != 1 {
		t.Fatalf("list all: exit %d\n%s", code, out)
	}
}

// TestDLQRefusesATinyRate: --rate below the floor (0.01 records/s), or
// NaN, is a usage error naming the flag and the floor, before anything is
// read or moved: at 1e-300 records/s a redrive would move one record and
// hold the DLQ's lease for ever.
func TestDLQRefusesATinyRate(t *testing.T) {
	path := dlqEnv(t)
	for _, sub := range [][]string{{"redrive"}, {"discard", "--reason", "x"}} {
		for _, r := range []string{"1e-300", "0.009", "NaN", "1e-400"} { // 1e-400 parses as 0, "no limit"
			args := append(append([]string{"dlq"}, sub...), "-c", path, "--topic", "orders", "--rate", r, "--dry-run")
			code, out, errs := kretry(t, args...)
			if code != exitUsage || !strings.Contains(errs, "--rate") || !strings.Contains(errs, "0.01") {
				t.Errorf("%s --rate %s: exit %d, want %d naming --rate and the floor 0.01\n%s%s", sub[0], r, code, exitUsage, out, errs)
			}
		}
	}
	code, out, _ := kretry(t, "dlq", "stats", "-c", path, "--topic", "orders")
	if code != exitOK || !strings.Contains(out, "waiting 4") {
		t.Fatalf("stats after the refusals: exit %d\n%s", code, out)
	}
}

// TestDLQRefusesARecordOutsideTheDLQ: --record naming a partition the DLQ
// does not have, or an offset outside [log start, last stable offset), is a
// usage error naming the partition and what the DLQ holds, for every
// subcommand that takes it; "selected 0" read as done.
func TestDLQRefusesARecordOutsideTheDLQ(t *testing.T) {
	path := dlqEnv(t)
	for _, c := range []struct{ ref, want string }{
		{"9/9", "orders.dlq has no partition 9: it has 1 partitions (0 to 0)"},
		{"0/4", "partition 0 of orders.dlq holds offsets 0 to 3"},
	} {
		for _, sub := range [][]string{{"redrive"}, {"redrive", "--dry-run"}, {"discard", "--reason", "x"}, {"list"}, {"show"}} {
			args := append(append([]string{"dlq"}, sub...), "-c", path, "--topic", "orders", "--record", c.ref, "--quiet")
			if sub[0] == "list" || sub[0] == "show" {
				args = args[:len(args)-1]
			}
			code, out, errs := kretry(t, args...)
			if code != exitUsage || !strings.Contains(errs, "record "+c.ref+": "+c.want) {
				t.Errorf("%v --record %s: exit %d, want %d naming %q\n%s%s", sub, c.ref, code, exitUsage, c.want, out, errs)
			}
		}
	}
	code, out, _ := kretry(t, "dlq", "stats", "-c", path, "--topic", "orders")
	if code != exitOK || !strings.Contains(out, "waiting 4") {
		t.Fatalf("stats after the refusals: exit %d\n%s", code, out)
	}
}

// TestDLQStatusWithoutOneIsADash: a record without an HTTP status shows
// STATUS "-" in stats' fingerprints and in a dry run, as dlq list shows
// it, never 0.
func TestDLQStatusWithoutOneIsADash(t *testing.T) {
	path := dlqEnv(t)
	code, out, errs := kretry(t, "dlq", "stats", "-c", path, "--topic", "orders")
	var row string
	for l := range strings.Lines(out) {
		if strings.Contains(l, " unreadable ") {
			row = l
		}
	}
	if f := strings.Fields(row); code != exitOK || len(f) < 4 || f[3] != "-" {
		t.Errorf("stats: exit %d, the unreadable fingerprint row %q, want STATUS -\n%s%s", code, row, out, errs)
	}
	code, out, errs = kretry(t, "dlq", "list", "-c", path, "--topic", "orders", "--class", "unreadable")
	if code != exitOK || !strings.Contains(out, " unreadable  -  ") {
		t.Errorf("list: exit %d, want STATUS -\n%s%s", code, out, errs)
	}
	code, out, errs = kretry(t, "dlq", "discard", "-c", path, "--topic", "orders", "--class", "unreadable", "--reason", "x", "--dry-run")
	if code != exitOK || !strings.Contains(out, " unreadable -  ") {
		t.Errorf("discard --dry-run: exit %d, want the status as -\n%s%s", code, out, errs)
	}
}

// TestProgressBarPrintsNoRateBeforeThereIsOne: dlq.Progress has no rate
// before the second move; the bar then prints none rather than "0.0/s".
func TestProgressBarPrintsNoRateBeforeThereIsOne(t *testing.T) {
	var b bytes.Buffer
	bar := &progressBar{w: &b}
	bar.update(dlq.Progress{Total: 2, Moved: 1})
	if strings.Contains(b.String(), "/s") || strings.Contains(b.String(), "ETA") {
		t.Errorf("after the first move: %q, want no rate or ETA", b.String())
	}
	b.Reset()
	bar.update(dlq.Progress{Total: 2, Moved: 2, Rate: 1, Elapsed: time.Second})
	if !strings.Contains(b.String(), "2/2  1.0/s  ETA 0s") {
		t.Errorf("after the second move: %q, want 2/2  1.0/s  ETA 0s", b.String())
	}
}

// With no broker answering, a dlq command prints its one error (which
// names kafka.brokers), not the Kafka client's connection warnings
// before it, as kretry lag does (newcomer walk).
func TestDLQWithNoBrokerPrintsOneError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, "kafka:\n  brokers: [127.0.0.1:1]\napp:\n  url: http://127.0.0.1:8080/kafka\ntopics:\n  - name: orders\n")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"dlq", "stats", "-c", path, "--topic", "orders"}, &out, &errb); code != exitFail {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", code, exitFail, errb.String())
	}
	if s := errb.String(); strings.Count(strings.TrimSpace(s), "\n") != 0 || !strings.Contains(s, "kafka.brokers") || strings.Contains(s, "level=WARN") {
		t.Errorf("stderr:\n%s\nwant one line naming kafka.brokers, no client warnings", s)
	}
}

// TestDLQShowAMarker: an offset inside the DLQ's range that holds no
// record (a transaction's commit marker) is said to be one, with the
// same exit (2) as an offset outside the range.
func TestDLQShowAMarker(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.TransactionalID("test-marker"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for _, topic := range []string{"orders", "orders.dlq", "orders.retry.1m"} {
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	m := retrytopics.Move{Origin: retrytopics.Origin{Topic: "orders", Timestamp: time.Now(), Attempts: 1}, Value: []byte("order"),
		Topic: "orders.dlq", Failure: retrytopics.Failure{Class: delivery.ClassPermanent, Status: 422, Message: "status 422", At: time.Now()}, Group: "orders-kretry"}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, m.Record()).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, fmt.Sprintf("embedded: {listen: %q}\napp: {url: http://127.0.0.1:8080/kafka}\ntopics: [{name: orders, retry: {tiers: [1m]}}]\n", b.Addrs()[0]))
	if code, out, errs := kretry(t, "dlq", "show", "-c", path, "--topic", "orders", "--record", "0/0"); code != exitOK {
		t.Fatalf("show 0/0: exit %d\n%s%s", code, out, errs)
	}
	code, _, errs := kretry(t, "dlq", "show", "-c", path, "--topic", "orders", "--record", "0/1")
	if want := "partition 0 offset 1 of orders.dlq holds no record: a transaction's commit marker"; code != exitUsage || !strings.Contains(errs, want) {
		t.Errorf("show 0/1 (the marker): exit %d, %q; want %d and %q", code, errs, exitUsage, want)
	}
}

// TestDLQFilterFlagsSayWhatToWrite: a count of days, a time without its
// zone, a window that ends before it starts and an empty --by are usage
// errors that say what to write; --state and --record take commas as
// --class and --status do.
func TestDLQFilterFlagsSayWhatToWrite(t *testing.T) {
	path := dlqEnv(t)
	for _, tc := range []struct{ args, want string }{
		{"list --since 7d", `"7d": a duration has no day unit, write "168h"`},
		{"list --until 2026-12-07T01:00:00", `"2026-12-07T01:00:00" has no time zone: add Z for UTC (2026-12-07T01:00:00Z)`},
		{"list --since 2h --until 3h", "--since 2h ("},
		{"list --since 2h --until 2h", "--since 2h ("}, // an empty window, both from one now
		{"redrive --dry-run --by= ", "--by is empty"},
		{"list --state waiting,bogus", `--state "bogus": want waiting, redriven, discarded or all`},
		{"list --record 0/01", `--record: record "0/01": want <partition>/<offset>`}, // parsed, it matched nothing
		{"list --record +0/1", `--record: record "+0/1": want <partition>/<offset>`},
	} {
		code, out, errs := kretry(t, append([]string{"dlq"}, append(strings.Fields(tc.args), "-c", path, "--topic", "orders")...)...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("dlq %s: exit %d, want %d and %q\n%s%s", tc.args, code, exitUsage, tc.want, out, errs)
		}
	}
	code, out, errs := kretry(t, "dlq", "list", "-c", path, "--topic", "orders", "--state", "waiting,redriven", "--record", "0/0,0/2", "--json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); code != exitOK || err != nil || len(rows) != 2 || rows[0]["record"] != "0/0" || rows[1]["record"] != "0/2" {
		t.Errorf("--state and --record with commas: exit %d, %v\n%s%s", code, err, out, errs)
	}
}

// TestDLQResultSaysHowToContinue: a redrive with --limit 20 stopped after
// 13 said "run the same command again", which selects 20 anew and moved 33
// in all (found by a breaker helper); it now names --limit 7. A redrive
// that failed midway printed only its error, not what it had moved.
func TestDLQResultSaysHowToContinue(t *testing.T) {
	entries := make([]*dlq.Entry, 20)
	for _, tc := range []struct {
		name    string
		stopped bool
		limit   int
		failed  error
		want    []string
	}{
		{"stopped, no limit", true, 0, nil, []string{"selected 20, redriven 13", "stopped before the end: 7 left; run the same command again to continue"}},
		{"stopped, limit", true, 20, nil, []string{"stopped before the end: 7 left; run it again with --limit 7 to continue (with --limit 20 it selects 20 more)"}},
		{"failed, limit", false, 20, fmt.Errorf("a transaction failed"), []string{"selected 20, redriven 13", "not finished: 7 left; once the error below is resolved, run it again with --limit 7"}},
	} {
		var out bytes.Buffer
		printResult(&out, &dlq.Result{Action: dlq.ActionRedrive, Selected: 20, Moved: 13, Stopped: tc.stopped, Entries: entries}, false, tc.limit, tc.failed)
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: printed %q, want it to say %q", tc.name, out.String(), w)
			}
		}
	}
}

// TestDLQDryRunJSONListsTheRecords: --dry-run --json printed the counts
// only, while the text form and the admin API list what would move (found
// by a newcomer).
func TestDLQDryRunJSONListsTheRecords(t *testing.T) {
	var out bytes.Buffer
	e := &dlq.Entry{Partition: 0, Offset: 2, ID: "orders/0/2", Key: []byte("customer-2")}
	printResult(&out, &dlq.Result{Action: dlq.ActionRedrive, DryRun: true, Selected: 1, Entries: []*dlq.Entry{e}}, true, 0, nil)
	var got struct {
		DryRun   bool `json:"dry_run"`
		Selected int  `json:"selected"`
		Records  []struct {
			Record string `json:"record"`
		} `json:"records"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if !got.DryRun || got.Selected != 1 || len(got.Records) != 1 {
		t.Errorf("dry run JSON %s: want dry_run, selected 1 and its one record", out.String())
	}
}
