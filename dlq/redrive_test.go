package dlq_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/internal/topicread"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// deadLetter produces n records (binary key, binary header) that the app
// rejects with 422, runs the engine and waits for all n in the DLQ. The app
// then accepts everything.
func deadLetter(t testing.TB, e *env, c *dlq.Client, n int) *dlq.Snapshot {
	t.Helper()
	return deadLetterWith(t, e, c, n, e.run)
}

// deadLetterWith is deadLetter with run starting the engine.
func deadLetterWith(t testing.TB, e *env, c *dlq.Client, n int, run func()) *dlq.Snapshot {
	t.Helper()
	e.app.set(rejectAll)
	run()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Key: []byte{0xff, byte(i)}, Value: []byte(fmt.Sprintf("order-%d", i)),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte{0, byte(i)}}, {Key: "h", Value: nil}}})
	}
	e.produce(recs...)
	snap := e.waitDLQ(c, n)
	e.app.set(nil)
	return snap
}

func TestRedriveDeliversOriginalWithRedriveHeaders(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond, 100*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 4)
	pick := []string{snap.Entries[0].Ref(), snap.Entries[3].Ref()}
	byRef := map[string]*dlq.Entry{}
	for _, en := range snap.Entries {
		byRef[en.Ref()] = en
	}

	dry, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Filter: dlq.Filter{Records: pick}, DryRun: true, Rate: -1})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Entries) != 2 || dry.Moved != 0 {
		t.Fatalf("dry run: %d entries, %d moved; want 2, 0", len(dry.Entries), dry.Moved)
	}
	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Filter: dlq.Filter{Records: pick}, Rate: -1, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 2 || res.MovedByClass["permanent"] != 2 {
		t.Fatalf("moved %d (%v), want 2 permanent", res.Moved, res.MovedByClass)
	}
	eventually(t, "two redriven deliveries", func() bool { return len(e.app.redriven()) >= 2 })
	for _, m := range e.app.redriven() {
		var src *dlq.Entry
		for _, ref := range pick {
			if byRef[ref].ID == m.ID {
				src = byRef[ref]
			}
		}
		if src == nil {
			t.Fatalf("redriven %s was not selected", m.ID)
		}
		if m.Attempt != 1 || m.Redrives != 1 || m.RedriveID != res.Op || !bytes.Equal(m.Key, src.Key) || !bytes.Equal(m.Value, src.Value) ||
			m.Topic != e.plan.Source || m.Offset != src.Origin.Offset {
			t.Errorf("redriven delivery %+v, want attempt 1, redrive 1 (%s), key %x value %q", m, res.Op, src.Key, src.Value)
		}
		if len(m.Headers) != 2 || m.Headers[0].Key != "h" || !bytes.Equal(m.Headers[0].Value, src.Origin.Headers[0].Value) || m.Headers[1].Value != nil {
			t.Errorf("headers %v, want the original two", m.Headers)
		}
	}
	// Marked: two redriven, two waiting; a second run moves only those two.
	after, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st := dlq.StatsOf(after.Entries)
	if st.Waiting != 2 || st.Redriven != 2 {
		t.Fatalf("stats %+v, want 2 waiting, 2 redriven", st)
	}
	res2, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Moved != 2 {
		t.Fatalf("second redrive moved %d, want the 2 left", res2.Moved)
	}
	eventually(t, "four redriven deliveries", func() bool { return len(e.app.redriven()) >= 4 })
	for _, en := range snap.Entries {
		if n := e.app.ackedCount(en.ID); n != 1 {
			t.Errorf("%s acknowledged %d times, want 1", en.ID, n)
		}
	}
}

func TestRedrivenRecordFailingAgainReturnsOnceWithItsCount(t *testing.T) {
	e := newEnv(t, 1, 50*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 1)
	id := snap.Entries[0].ID
	e.app.set(rejectAll)
	for round := 1; round <= 2; round++ {
		res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
		if err != nil || res.Moved != 1 {
			t.Fatalf("round %d: moved %v, err %v", round, res, err)
		}
		s := e.waitDLQ(c, round+1)
		last := s.Entries[len(s.Entries)-1]
		if last.ID != id || last.Redrives != int64(round) || last.RedriveID != res.Op || last.State != dlq.Waiting {
			t.Fatalf("round %d: back in the DLQ as %s redrives %d (%s) state %s; want %s, %d, %s, waiting",
				round, last.ID, last.Redrives, last.RedriveID, last.State, id, round, res.Op)
		}
	}
}

func TestRedrivenRecordGetsEveryTierAfresh(t *testing.T) {
	e := newEnv(t, 1, 50*time.Millisecond, 100*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 1)
	id := snap.Entries[0].ID
	fails := 1
	e.app.set(func(m *delivery.Message) error {
		if m.Redrives > 0 && fails > 0 {
			fails--
			return &delivery.StatusError{Status: 503}
		}
		return nil
	})
	if _, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the redriven record acknowledged", func() bool { return e.app.ackedCount(id) == 1 })
	rs := e.app.redriven()
	if len(rs) != 2 || rs[0].Attempt != 1 || rs[1].Attempt != 2 || rs[1].Redrives != 1 {
		t.Fatalf("redriven deliveries %+v, want attempts 1, 2 with redrive count 1", rs)
	}
	// The retry went to the first tier again, not the second.
	if n := countRecords(t, e, e.plan.Tiers[1].Topic); n != 0 {
		t.Fatalf("%s holds %d records, want 0: the retry of a redriven record starts at the first tier", e.plan.Tiers[1].Topic, n)
	}
}

// countRecords counts the committed records of topic (readAll).
func countRecords(t *testing.T, e *env, topic string) int {
	t.Helper()
	return len(readAll(t, e, topic))
}

func TestSecondRedriveOfTheSameDLQIsRefused(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	deadLetter(t, e, c, 6)
	first := make(chan error, 1)
	progressed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := c.Move(ctx, dlq.Request{Action: dlq.ActionRedrive, Rate: 2, Progress: func(dlq.Progress) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		}})
		first <- err
	}()
	<-progressed
	_, err := e.client().Move(context.Background(), dlq.Request{Action: dlq.ActionDiscard, Reason: "x", Rate: -1})
	var busy *dlq.BusyError
	if !errors.As(err, &busy) || busy.Lease.Action != "redrive" || !strings.Contains(err.Error(), "holds it") {
		t.Fatalf("second operation: %v, want a BusyError naming the redrive", err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first redrive: %v", err)
	}
	// Once it ended, the DLQ is free at once.
	if res, err := e.client().Move(context.Background(), dlq.Request{Action: dlq.ActionDiscard, Reason: "x", Rate: -1}); err != nil || res.Moved != 0 {
		t.Fatalf("after the first ended: %+v, %v; want nothing left to discard", res, err)
	}
}

func TestCtrlCStopsCleanlyAndARerunContinues(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 6)
	ctx, cancel := context.WithCancel(context.Background())
	res, err := c.Move(ctx, dlq.Request{Action: dlq.ActionRedrive, Rate: 4, Progress: func(p dlq.Progress) {
		if p.Moved >= 2 {
			cancel()
		}
	}})
	if err != nil || !res.Stopped || res.Moved < 2 || res.Moved >= 6 {
		t.Fatalf("stopped run: %+v, %v; want stopped with 2–5 moved", res, err)
	}
	res2, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if err != nil || res2.Moved != 6-res.Moved {
		t.Fatalf("rerun: %+v, %v; want the %d left", res2, err, 6-res.Moved)
	}
	for _, en := range snap.Entries {
		eventually(t, en.ID+" acknowledged", func() bool { return e.app.ackedCount(en.ID) == 1 })
	}
	if n := len(e.app.redriven()); n != 6 {
		t.Fatalf("%d redriven deliveries, want 6", n)
	}
}

// helperEnv makes the test binary a redrive process (TestMain).
const helperEnv = "KRETRY_DLQ_TEST_HELPER"

// helperRedrive runs one redrive from $KRETRY_DLQ_TEST_HELPER
// ("addrs|source|dlq|tier[|kill point]") at 5 records/s, printing "moved N"
// after each commit; with a kill point (killpoints_test.go) it SIGKILLs
// itself there.
func helperRedrive() int {
	f := strings.Split(os.Getenv(helperEnv), "|")
	opts := []kgo.Opt{kgo.SeedBrokers(strings.Split(f[0], ",")...)}
	req := dlq.Request{Action: dlq.ActionRedrive, Rate: 5}
	if len(f) > 4 {
		opts = append(opts, killAt(f[4], &req)...)
	}
	c, err := dlq.New(dlq.Topic{Source: f[1], DLQ: f[2], Tier: f[3]}, opts, dlq.WithLeaseTTL(2*time.Second))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	progress := req.Progress
	req.Progress = func(p dlq.Progress) {
		fmt.Printf("moved %d\n", p.Moved)
		if progress != nil {
			progress(p)
		}
	}
	_, err = c.Move(context.Background(), req)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	return 0
}

func TestKillNineHalfwayThenRerunMovesEachOnce(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	const n = 12
	snap := deadLetter(t, e, c, n)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join([]string{strings.Join(e.addrs, ","), e.plan.Source, e.plan.DLQ, e.plan.Tiers[0].Topic}, "|"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	moved := ""
	for sc.Scan() {
		t.Logf("helper: %s", sc.Text())
		var k int
		if _, err := fmt.Sscanf(sc.Text(), "moved %d", &k); err == nil && k >= 3 {
			moved = sc.Text()
			break
		}
	}
	if moved == "" {
		t.Fatal("the helper redrive ended before moving 3 records")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no release, maybe a transaction open
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The rerun takes over the lapsed lease and moves the rest.
	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed after %q; the rerun moved %d", moved, res.Moved)
	if res.Moved < 1 || res.Moved > n-3 {
		t.Fatalf("rerun moved %d, want 1..%d", res.Moved, n-3)
	}
	for _, en := range snap.Entries {
		eventually(t, en.ID+" acknowledged", func() bool { return e.app.ackedCount(en.ID) == 1 })
	}
	// Exactly n committed copies on the tier, one per record.
	seen := map[string]int{}
	for _, r := range readAll(t, e, e.plan.Tiers[0].Topic) {
		o, err := retrytopics.ReadOrigin(r, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		if o.Redrives == 1 && o.Attempts == 0 {
			seen[o.ID()]++
		}
	}
	if len(seen) != n {
		t.Fatalf("%d records redriven onto the tier, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s redriven %d times, want once", id, k)
		}
	}
	if got := len(e.app.redriven()); got != n {
		t.Errorf("%d redriven deliveries, want %d", got, n)
	}
}

// readAll reads topic's committed records up to its last stable offsets
// as listed now (internal/topicread, as the DLQ tools read): a first fetch
// slower than a poll's timeout on a loaded machine is not taken for the
// end (seen in a newcomer's make test: TestKillNineAtEachPointThenRerun...
// found 0 of 6 records that its app had been delivered from the tier).
func readAll(t *testing.T, e *env, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lso, err := e.adm.ListCommittedOffsets(ctx, topic)
	if err == nil {
		err = lso.Error()
	}
	if err != nil {
		t.Fatalf("listing the last stable offsets of %s: %v", topic, err)
	}
	from, ends := map[int32]int64{}, map[int32]int64{}
	lso.Each(func(o kadm.ListedOffset) { from[o.Partition], ends[o.Partition] = 0, o.Offset })
	var out []*kgo.Record
	if err := topicread.Range(ctx, []kgo.Opt{kgo.SeedBrokers(e.addrs...)}, topic, true, from, ends, func(r *kgo.Record) { out = append(out, r) }); err != nil {
		t.Fatalf("reading %s: %v", topic, err)
	}
	return out
}

// TestRedriveToAMissingTierIsRefused: a config whose first tier is not
// kretry run's (a tier list edited since) names a tier that does not
// exist: the redrive says so and moves nothing, dry run or not, instead of
// failing each transaction with UNKNOWN_TOPIC_OR_PARTITION and "run the
// same command again", which could never succeed.
func TestRedriveToAMissingTierIsRefused(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond, 100*time.Millisecond)
	snap := deadLetter(t, e, e.client(), 2)
	topic := e.topic()
	topic.Tier = e.plan.Source + ".retry.1m"
	c, err := dlq.New(topic, []kgo.Opt{kgo.SeedBrokers(e.addrs...)}, dlq.WithLogger(testLogger(t)), dlq.WithLeaseTTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, dry := range []bool{true, false} {
		res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1, By: "test", DryRun: dry})
		if !errors.Is(err, dlq.ErrNoTier) || !strings.Contains(err.Error(), topic.Tier+", the first retry tier of") {
			t.Errorf("dry run %v: %+v, %v; want ErrNoTier naming %s", dry, res, err, topic.Tier)
		}
	}
	after, err := e.client().Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, en := range after.Entries {
		if en.State != dlq.Waiting || en.ID != snap.Entries[i].ID {
			t.Errorf("DLQ record %s is %s after the refused redrive, want waiting", en.ID, en.State)
		}
	}
	if len(after.Entries) != len(snap.Entries) {
		t.Errorf("%d DLQ records after the refused redrive, want %d", len(after.Entries), len(snap.Entries))
	}
}

// TestANamedRecordHandledAlreadyIsSaidSo: redriving (or discarding) a
// record named by Filter.Records that was redriven or discarded already
// moves nothing and says what became of it, by whom and in which
// operation, dry run or not, instead of "selected 0" alone.
func TestANamedRecordHandledAlreadyIsSaidSo(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond, 100*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 2)
	redriven, discarded := snap.Entries[0].Ref(), snap.Entries[1].Ref()
	first, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Filter: dlq.Filter{Records: []string{redriven}}, Rate: -1, By: "alice"})
	if err != nil || first.Moved != 1 {
		t.Fatalf("redrive: %+v, %v", first, err)
	}
	second, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionDiscard, Filter: dlq.Filter{Records: []string{discarded}}, Rate: -1, By: "bob", Reason: "duplicate order"})
	if err != nil || second.Moved != 1 {
		t.Fatalf("discard: %+v, %v", second, err)
	}
	for _, dry := range []bool{true, false} {
		res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Filter: dlq.Filter{Records: []string{redriven, discarded}}, Rate: -1, By: "carol", DryRun: dry})
		if err != nil {
			t.Fatal(err)
		}
		if res.Moved != 0 || len(res.Entries) != 0 || len(res.Skipped) != 2 {
			t.Fatalf("dry run %v: %+v; want nothing moved and both skipped", dry, res)
		}
		for i, want := range []string{
			"already redriven by alice at ", "(op " + first.Op + ")",
			"already discarded by bob at ", "(op " + second.Op + "): duplicate order",
		} {
			if got := res.Skipped[i/2]; !strings.Contains(got.Reason, want) {
				t.Errorf("dry run %v: skipped %s: %q, want %q", dry, got.Record, got.Reason, want)
			}
		}
	}
}
