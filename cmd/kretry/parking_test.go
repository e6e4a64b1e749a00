package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/parking"
	"github.com/kretry/kretry/pkg/flow"
)

// TestParkingReleaseFindsThePartition: the key is parked on partition 2,
// which is not where murmur2 would put it; the command must find it there,
// and refuse a key that is parked nowhere.
func TestParkingReleaseFindsThePartition(t *testing.T) {
	b, cl, cfg := parkingRig(t, 3, "on_dead_letter: hold")
	ctx := context.Background()
	key := "customer-42"
	if p := kgo.StickyKeyPartitioner(nil).ForTopic("orders").Partition(&kgo.Record{Key: []byte(key)}, 3); p == 2 {
		t.Fatalf("test assumes murmur2 does not pick partition 2 for %q", key)
	}
	// As an engine leaves a held key: its head's block, a record parked
	// behind it, the head dead-lettered under hold.
	const head = "orders/2/5"
	held := []*kgo.Record{
		parking.OpRecord("orders.parking", 2, []byte(key), parking.OpBlock, head),
		{Topic: "orders.parking", Partition: 2, Key: []byte(key), Value: []byte("parked")},
		parking.OpRecord("orders.parking", 2, []byte(key), parking.OpRelease, parking.ReleaseRef(string(flow.OnDeadLetterHold), head)),
	}
	parkRecords(t, cl, held...)

	// The lookup's first fetch answers after 1.5s, as a first fetch over
	// SASL_SSL on a loaded machine can: a slow fetch is not the end of the
	// topic (CI once saw "not parked" for a key the engine had just held).
	b.Cluster().ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
		return nil, nil, false
	})
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", key}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "partition 2") {
		t.Errorf("output %q does not name partition 2", out.String())
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"orders.parking": {2: kgo.NewOffset().At(int64(len(held)))}}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fs := rd.PollFetches(pctx)
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Key) != key || recs[0].Headers[0].Key != parking.HeaderOp {
		t.Fatalf("partition 2 after the parked record holds %v", recs)
	}

	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", "nobody"}, &out, &errb); code == 0 {
		t.Errorf("releasing a key parked nowhere exited 0: %s", out.String())
	}
	if !strings.Contains(errb.String(), "not parked") {
		t.Errorf("stderr %q does not say the key is not parked", errb.String())
	}

	// --partition where the key is not, while it is parked elsewhere:
	// refused, naming where it is.
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", key, "--partition", "1"}, &out, &errb); code != exitFail || out.Len() > 0 {
		t.Errorf("--partition 1 for a key parked in 2: exit %d, stdout %q; want %d and nothing written", code, out.String(), exitFail)
	}
	if want := "not parked or blocked in orders.parking partition 1, but in partition 2"; !strings.Contains(errb.String(), want) {
		t.Errorf("--partition 1: stderr %q, want %q", errb.String(), want)
	}

	// The parking topic (or any stage) for --topic: exit 2, naming the
	// source to pass.
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders.parking", "--key", key}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "pass --topic orders") {
		t.Errorf("--topic orders.parking: exit %d, stderr %q; want %d and the source to pass", code, errb.String(), exitUsage)
	}

	// A --partition the parking topic does not have, or below -1, is a bad
	// flag: exit 2 with the range.
	for _, tc := range []struct{ n, want string }{
		{"7", "--partition 7: orders.parking has partitions 0–2"},
		{"-2", "--partition -2:"},
	} {
		out.Reset()
		errb.Reset()
		if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", key, "--partition", tc.n}, &out, &errb); code != exitUsage {
			t.Errorf("--partition %s: exit %d, want %d (stderr %q)", tc.n, code, exitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("--partition %s: stderr %q, want %q", tc.n, errb.String(), tc.want)
		}
	}
}

// TestParkingReleaseRefusesARetryingHead: a key whose head is still in a
// retry tier is not held yet; a release read now would change nothing and
// the key would be held later all the same, so the command writes none
// and says why (exit 1).
func TestParkingReleaseRefusesARetryingHead(t *testing.T) {
	_, cl, cfg := parkingRig(t, 2, "on_dead_letter: hold")
	ctx := context.Background()
	key := []byte("acct-3")
	blocked := []*kgo.Record{
		parking.OpRecord("orders.parking", 1, key, parking.OpBlock, "orders/1/9"),
		{Topic: "orders.parking", Partition: 1, Key: key, Value: []byte("parked")},
	}
	parkRecords(t, cl, blocked...)
	for _, args := range [][]string{{}, {"--partition", "1"}} {
		var out, errb bytes.Buffer
		cmd := append([]string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", string(key)}, args...)
		if code := run(ctx, cmd, &out, &errb); code != exitFail || out.Len() > 0 {
			t.Errorf("%v: exit %d, stdout %q; want %d and nothing written", args, code, out.String(), exitFail)
		}
		if want := "its record orders/1/9 is still in a retry tier (1 parked behind it)"; !strings.Contains(errb.String(), want) {
			t.Errorf("%v: stderr %q, want %q", args, errb.String(), want)
		}
	}
	n, err := kadm.NewClient(cl).ListEndOffsets(ctx, "orders.parking")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := n.Lookup("orders.parking", 1); o.Offset != int64(len(blocked)) {
		t.Errorf("orders.parking partition 1 ends at %d, want %d: a release was written", o.Offset, len(blocked))
	}
}

// TestParkingList: the keys that are not idle, each with its partition,
// state, parked records and head; --held keeps the held ones; --json.
func TestParkingList(t *testing.T) {
	_, cl, cfg := parkingRig(t, 2, "on_dead_letter: hold")
	ctx := context.Background()
	const pt = "orders.parking"
	op := func(p int32, key, kind, ref string) *kgo.Record {
		return parking.OpRecord(pt, p, []byte(key), kind, ref)
	}
	parked := func(p int32, key string) *kgo.Record {
		return &kgo.Record{Topic: pt, Partition: p, Key: []byte(key), Value: []byte("parked")}
	}
	hold := string(flow.OnDeadLetterHold)
	recs := []*kgo.Record{
		op(0, "held-key", parking.OpBlock, "orders/0/1"), parked(0, "held-key"), parked(0, "held-key"),
		op(0, "held-key", parking.OpRelease, parking.ReleaseRef(hold, "orders/0/1")),
		op(1, "retrying-key", parking.OpBlock, "orders/1/4"), parked(1, "retrying-key"),
		op(1, "done-key", parking.OpBlock, "orders/1/2"), op(1, "done-key", parking.OpRelease, parking.ReleaseRef(parking.VerdictOK, "orders/1/2")),
		op(1, "done-key", parking.OpUnblock, ""),
	}
	parkRecords(t, cl, recs...)
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"parking", "list", "-c", cfg, "--topic", "orders"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{
		"0          held-key      held     2       -",
		"1          retrying-key  blocked  1       orders/1/4",
		"2 keys in orders.parking, 1 held: release one with kretry parking release -c " + cfg + " --topic orders --key KEY",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("list lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "done-key") {
		t.Errorf("an idle key is listed:\n%s", out.String())
	}
	out.Reset()
	if code := run(ctx, []string{"parking", "list", "-c", cfg, "--topic", "orders", "--held", "--json"}, &out, &errb); code != exitOK {
		t.Fatalf("--held --json: exit %d: %s", code, errb.String())
	}
	var rows []parkedKey
	if err := json.Unmarshal(out.Bytes(), &rows); err != nil || len(rows) != 1 || rows[0].Key != "held-key" || rows[0].State != "held" || rows[0].Parked != 2 || string(rows[0].KeyBytes) != "held-key" {
		t.Errorf("--held --json: %v, %+v\n%s", err, rows, out.String())
	}
}

// TestParkingListHeldWhenNoneIsHeld: --held with a key blocked but not
// held says no key is held and how many were left out, not that nothing
// is parked (a newcomer polling it during the README's hold recipe read
// "no key is parked or blocked" while one was).
func TestParkingListHeldWhenNoneIsHeld(t *testing.T) {
	_, cl, cfg := parkingRig(t, 1, "on_dead_letter: hold")
	parkRecords(t, cl, parking.OpRecord("orders.parking", 0, []byte("k"), parking.OpBlock, "orders/0/1"),
		&kgo.Record{Topic: "orders.parking", Key: []byte("k"), Value: []byte("parked")})
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"parking", "list", "-c", cfg, "--topic", "orders", "--held"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if want := "no key is held in orders.parking (1 not held yet or no more"; !strings.Contains(out.String(), want) {
		t.Errorf("--held with one key blocked: %q, want %q", out.String(), want)
	}
}

// TestParkingReleaseWithOrderingPartition: with ordering partition the
// engine keeps one lane per partition, whose ops carry an empty key; the
// parked records keep their own. A key's release goes to the partition
// where its records are parked, judged by the partition's lane, and list
// names the lane "(whole partition)".
func TestParkingReleaseWithOrderingPartition(t *testing.T) {
	_, cl, cfg := parkingRig(t, 2, "ordering: partition, on_dead_letter: hold")
	ctx := context.Background()
	const pt, head = "orders.parking", "orders/1/3"
	recs := []*kgo.Record{
		parking.OpRecord(pt, 1, []byte{}, parking.OpBlock, head),
		{Topic: pt, Partition: 1, Key: []byte("customer-7"), Value: []byte("parked")},
		{Topic: pt, Partition: 1, Key: []byte("customer-9"), Value: []byte("parked")},
		parking.OpRecord(pt, 1, []byte{}, parking.OpRelease, parking.ReleaseRef(string(flow.OnDeadLetterHold), head)),
		parking.OpRecord(pt, 0, []byte{}, parking.OpBlock, "orders/0/8"),
		{Topic: pt, Partition: 0, Key: []byte("customer-5"), Value: []byte("parked")},
		parking.OpRecord(pt, 0, []byte{}, parking.OpRelease, parking.ReleaseRef(string(flow.OnDeadLetterHold), "orders/0/8")),
	}
	parkRecords(t, cl, recs...)
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"parking", "list", "-c", cfg, "--topic", "orders"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "1          (whole partition)  held   2") {
		t.Errorf("list: exit %d\n%s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", "customer-9"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "partition 1") {
		t.Errorf("release: exit %d\n%s%s", code, out.String(), errb.String())
	}
	// The partition alone names the lane (the engine's hold line says so).
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--partition", "0"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "partition 0") {
		t.Errorf("release --partition 0: exit %d\n%s%s", code, out.String(), errb.String())
	}
	// Released, partition 1 is not held any more.
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--partition", "1"}, &out, &errb); code != exitFail || !strings.Contains(errb.String(), "being delivered already") {
		t.Errorf("release --partition 1 again: exit %d\n%s%s", code, out.String(), errb.String())
	}
}

// TestParkingReleaseByHex: a binary key, which parking list prints as
// 0x…, is released with --key-hex; --key and --key-hex together, or bad
// hex, are usage errors.
func TestParkingReleaseByHex(t *testing.T) {
	_, cl, cfg := parkingRig(t, 1, "on_dead_letter: hold")
	ctx := context.Background()
	const pt, head = "orders.parking", "orders/0/1"
	key := []byte("K\xff\x01")
	recs := []*kgo.Record{
		parking.OpRecord(pt, 0, key, parking.OpBlock, head),
		{Topic: pt, Partition: 0, Key: key, Value: []byte("parked")},
		parking.OpRecord(pt, 0, key, parking.OpRelease, parking.ReleaseRef(string(flow.OnDeadLetterHold), head)),
	}
	parkRecords(t, cl, recs...)
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"parking", "list", "-c", cfg, "--topic", "orders"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "0x4bff01  held") {
		t.Errorf("list: exit %d\n%s%s", code, out.String(), errb.String())
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--key", "k", "--key-hex", "00"}, exitUsage, "give one"},
		{[]string{"--key-hex", "0xzz"}, exitUsage, "--key-hex \"0xzz\": want the key's bytes in hex"},
		{[]string{}, exitUsage, "--key KEY (or --key-hex HEX) is required"},
		{[]string{"--key-hex", "0x4bff01"}, exitOK, "written to orders.parking partition 0"},
	} {
		out.Reset()
		errb.Reset()
		code := run(ctx, append([]string{"parking", "release", "-c", cfg, "--topic", "orders"}, tc.args...), &out, &errb)
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("release %v: exit %d, want %d and %q\n%s%s", tc.args, code, tc.code, tc.want, out.String(), errb.String())
		}
	}
}

// parkingRig is an embedded broker with partitions, the topics orders and
// orders.parking, a client that writes to the partitions its records name,
// and the path of a config whose one topic is orders with topicFields
// ("on_dead_letter: hold"); closed at the end of the test.
func parkingRig(t *testing.T, partitions int32, topicFields string) (*broker.Broker, *kgo.Client, string) {
	t.Helper()
	b, cl, _ := testCluster(t, partitions, "orders", "orders.parking")
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	yaml := "kafka: {brokers: [" + b.Addrs()[0] + "]}\napp: {url: http://127.0.0.1:1/}\ntopics: [{name: orders, " + topicFields + "}]\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return b, cl, cfg
}

// parkRecords writes recs with cl.
func parkRecords(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// TestREADMEHeldLoopWaitsForTheKey: the README's hold recipe polls
// `parking list --held` with grep until customer-42 is held. Its pattern
// must not match the answer while no key is held (a newcomer's loop
// matched " held " in "no key is held in …" and went on at once, so the
// release that followed was refused), and must match the key's row once
// it is.
func TestREADMEHeldLoopWaitsForTheKey(t *testing.T) {
	m := regexp.MustCompile(`until bin/kretry parking list [^|]*--held \| grep -q '([^']+)'`).FindStringSubmatch(readme(t))
	if m == nil {
		t.Fatal("README has no `until bin/kretry parking list … --held | grep -q '…'` loop")
	}
	pattern := regexp.MustCompile(m[1]) // a basic grep pattern without \( or \{ reads the same in Go
	list := func(recs ...*kgo.Record) string {
		_, cl, cfg := parkingRig(t, 1, "on_dead_letter: hold")
		parkRecords(t, cl, recs...)
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"parking", "list", "-c", cfg, "--topic", "orders", "--held"}, &out, &errb); code != exitOK {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		return out.String()
	}
	const pt, key, head = "orders.parking", "customer-42", "orders/0/1"
	block := parking.OpRecord(pt, 0, []byte(key), parking.OpBlock, head)
	parked := &kgo.Record{Topic: pt, Key: []byte(key), Value: []byte(`{"order":2}`)}
	if out := list(block, parked); pattern.MatchString(out) {
		t.Errorf("README's pattern %q matches while the key is only blocked, so the loop would not wait:\n%s", m[1], out)
	}
	held := parking.OpRecord(pt, 0, []byte(key), parking.OpRelease, parking.ReleaseRef(string(flow.OnDeadLetterHold), head))
	if out := list(block, parked, held); !pattern.MatchString(out) {
		t.Errorf("README's pattern %q does not match the held key's row, so the loop would never end:\n%s", m[1], out)
	}
}
