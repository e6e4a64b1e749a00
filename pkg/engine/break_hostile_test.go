package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// forgedTierRecord is a record for tier (1-based) partition p with a full,
// well-formed kretry header run claiming a source record orders/p/N (N from
// 1000 on, one per call), due now; override replaces header values by name.
func (e *env) forgedTierRecord(tier int, p int32, key, value string, override map[string]string) *kgo.Record {
	now := time.Now()
	m := retrytopics.Move{
		Origin:  retrytopics.Origin{Topic: e.plan.Source, Partition: p, Offset: 1000 + forgedOffset.Add(1), Timestamp: now, Attempts: int64(tier)},
		Key:     []byte(key),
		Value:   []byte(value),
		Topic:   e.plan.Tiers[tier-1].Topic,
		Due:     now,
		Failure: retrytopics.Failure{Class: delivery.ClassTransient, Status: 503, Message: "forged", At: now},
		Group:   e.group(),
		Version: "forged",
	}
	r := m.Record()
	for i := range r.Headers {
		if v, ok := override[r.Headers[i].Key]; ok {
			r.Headers[i].Value = []byte(v)
		}
	}
	r.Partition = p
	return r
}

// slowApp wraps a recorder: deliveries whose value has a delay in delays
// take that long (outside the recorder's lock) before the recorder answers.
type slowApp struct {
	app    *recorder
	delays func(m *delivery.Message) time.Duration
}

func (s *slowApp) Deliver(ctx context.Context, m *delivery.Message) error {
	if d := s.delays(m); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.app.Deliver(ctx, m)
}

// A tier record whose kretry-original-partition names a partition that does
// not exist (hand-produced, or replayed from elsewhere) must not wedge the
// engine: its next move must still be written (to the partition it was read
// from, which the engine owns), and records of other partitions must be
// delivered once and committed. (Found at 44e1301: every transaction
// aborted, for ever, and every record of every partition was redelivered
// every 110ms.)
func TestBreakTierRecordNamingAnotherPartition(t *testing.T) {
	e := newEnv(t, 3, 100*time.Millisecond, 200*time.Millisecond)
	e.app.setAnswer(func(m *delivery.Message) error {
		if string(m.Value) == "poison" {
			return e503 // always: tier 2, then the DLQ as exhausted
		}
		return nil
	})
	eng, _ := e.start(e.options(e.app))
	e.produce(e.forgedTierRecord(1, 0, "p", "poison", map[string]string{retrytopics.HeaderOriginalPartition: "7"}))
	var recs []*kgo.Record
	for i := range 6 {
		r := rec("k"+strconv.Itoa(i), "ok-"+strconv.Itoa(i))
		r.Partition = int32(i % 3)
		recs = append(recs, r)
	}
	e.produce(recs...)
	eventually(t, "the other records acknowledged", func() bool { return e.app.numAcked() >= 6 })
	time.Sleep(time.Second) // tiers 100ms + 200ms: the forged record is through by now
	// The bug aborts every transaction carrying the forged move. One
	// incidental abort is allowed (on Kafka, CONCURRENT_TRANSACTIONS right
	// after a commit; see TestBreakRecordTooLargeToParkIsHeld), and with it
	// one redelivery.
	before := eng.Stats().Aborted.Load()
	time.Sleep(500 * time.Millisecond)
	aborted := eng.Stats().Aborted.Load()
	if aborted > before || aborted > 1 {
		t.Errorf("%d transactions aborted (%d in the last 500ms): the forged record's move is rejected by the broker and every transaction carrying it aborts", aborted, aborted-before)
	}
	for _, r := range recs {
		if n := len(e.app.callsFor(id(e.plan.Source, r.Partition, r.Offset))); int64(n) > 1+aborted {
			t.Errorf("%s delivered %d times, want 1 (no failure, no rebalance; %d aborted transactions)", id(e.plan.Source, r.Partition, r.Offset), n, aborted)
		}
	}
	if n := eng.Stats().Exhausted.Load(); n != 1 {
		t.Errorf("forged record dead-lettered %d times, want 1 (tier 2, then the DLQ)", n)
	}
}

// Attempt counts come from headers (invariant 5): a hostile or corrupt
// kretry-attempt must still give the app a positive attempt number.
func TestBreakAttemptHeaderOverflowAndNegative(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond, 200*time.Millisecond)
	e.start(e.options(e.app))
	e.produce(
		e.forgedTierRecord(1, 0, "a", "huge", map[string]string{retrytopics.HeaderAttempt: strconv.FormatInt(1<<63-1, 10)}),
		e.forgedTierRecord(1, 0, "b", "negative", map[string]string{retrytopics.HeaderAttempt: "-5"}),
		e.forgedTierRecord(1, 0, "c", "garbage", map[string]string{retrytopics.HeaderAttempt: "two"}),
	)
	eventually(t, "3 acknowledged", func() bool { return e.app.numAcked() == 3 })
	for _, v := range []string{"huge", "negative", "garbage"} {
		cs := e.app.callsForValue(v)
		if len(cs) != 1 {
			t.Errorf("%s: %d deliveries, want 1", v, len(cs))
			continue
		}
		if a := cs[0].msg.Attempt; a < 1 || (v != "huge" && a != 2) {
			t.Errorf("%s: delivered with attempt %d, want a positive attempt (2 for an unreadable count on tier 1)", v, a)
		}
	}
}

// A record on a tier due a century from now waits (its tier partition
// paused) without holding up anything else and without a busy loop.
func TestBreakFarFutureDueTime(t *testing.T) {
	e := newEnv(t, 2, 100*time.Millisecond)
	eng, _ := e.start(e.options(e.app))
	future := time.Now().AddDate(100, 0, 0).UTC().Format(retrytopics.TimeFormat)
	past := time.Now().AddDate(-30, 0, 0).UTC().Format(retrytopics.TimeFormat)
	e.produce(
		e.forgedTierRecord(1, 0, "f", "future", map[string]string{retrytopics.HeaderDueTime: future}),
		e.forgedTierRecord(1, 0, "g", "behind-future", nil), // same tier partition: FIFO, waits too
		e.forgedTierRecord(1, 1, "h", "past", map[string]string{retrytopics.HeaderDueTime: past}),
	)
	var recs []*kgo.Record
	for i := range 10 {
		r := rec("k"+strconv.Itoa(i), "ok-"+strconv.Itoa(i))
		r.Partition = int32(i % 2)
		recs = append(recs, r)
	}
	e.produce(recs...)
	eventually(t, "source records and the past-due record acknowledged", func() bool { return e.app.numAcked() == 11 })
	if n := len(e.app.callsForValue("future")); n != 0 {
		t.Errorf("the record due in 100 years was delivered %d times", n)
	}
	// Idle now except for the paused tier partition: measure CPU.
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	time.Sleep(time.Second)
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	wall := time.Since(start)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	if cpu > wall/2 {
		t.Errorf("process used %v of CPU in %v of idle wall time: busy loop?", cpu, wall)
	}
	t.Logf("idle CPU %v in %v; batches %d", cpu, wall, eng.Stats().Batches.Load())
}

// A handler that panics must not take the process down: the engine should
// recover and treat the delivery as a transient failure. Run in a child
// process, since a panic in a delivery goroutine kills the test binary.
func TestBreakHandlerPanic(t *testing.T) {
	if os.Getenv("KRETRY_BREAK_CHILD") == "panic" {
		e := newEnv(t, 1, 100*time.Millisecond)
		e.app.setAnswer(func(m *delivery.Message) error {
			if m.Attempt == 1 {
				panic("handler bug")
			}
			return nil
		})
		e.produce(rec("k", "v"))
		e.start(e.options(e.app))
		eventually(t, "acknowledged on retry", func() bool { return e.app.numAcked() == 1 })
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestBreakHandlerPanic$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KRETRY_BREAK_CHILD=panic")
	out, err := cmd.CombinedOutput()
	if err != nil {
		lines := strings.Split(string(out), "\n")
		t.Errorf("a panicking handler took the process down (%v); first lines of its output:\n%s", err, strings.Join(lines[:min(len(lines), 8)], "\n"))
	}
}

// A handler that ignores its context must not keep Run from returning past
// ShutdownGrace (Options.ShutdownGrace: "past it they are abandoned
// uncommitted"). The engine allows itself a second of slack; leaving the
// group (Close, which revokes the partitions) must not wait for the
// abandoned delivery all over again for DeliveryTimeout + 1s.
func TestBreakShutdownWithHandlerIgnoringContext(t *testing.T) {
	e := newEnv(t, 1)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	started := make(chan struct{}, 1)
	h := delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release // ignores ctx
		return nil
	})
	o := e.options(h)
	o.ShutdownGrace = 300 * time.Millisecond
	o.DeliveryTimeout = 3 * time.Second
	eng, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	e.produce(rec("k", "v"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("no delivery started")
	}
	cancel()
	stopAt := time.Now()
	bound := o.ShutdownGrace + time.Second + 500*time.Millisecond
	select {
	case <-done:
		if took := time.Since(stopAt); took > bound {
			t.Errorf("Run returned %v after cancel, past ShutdownGrace %v (+1s slack +0.5s margin)", took, o.ShutdownGrace)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Run has not returned 10s after cancel with ShutdownGrace 300ms: a handler ignoring ctx hangs shutdown")
		once.Do(func() { close(release) })
		<-done
	}
}

// A record whose value fills the source's max.message.bytes must still be
// movable: the kretry header run must not push the move over the stage
// topic's limit. (Found at 44e1301, when stages were created with the
// source's limit: MESSAGE_TOO_LARGE, and the transaction carrying it
// aborted every 110ms for ever.)
func TestBreakNearMaxSizeRecordIsRetried(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	const limit = 1 << 20
	ls := strconv.Itoa(limit)
	// Recreate the source with a 1 MiB limit.
	if _, err := e.adm.DeleteTopic(context.Background(), e.plan.Source); err != nil {
		t.Fatal(err)
	}
	eventually(t, "source deleted", func() bool {
		ds, err := e.adm.ListTopics(context.Background(), e.plan.Source)
		return err == nil && !ds.Has(e.plan.Source)
	})
	if _, err := e.adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &ls}, e.plan.Source); err != nil {
		t.Fatal(err)
	}
	// On Kafka a broker may answer DescribeConfigs of a topic just made
	// with the default limit for a moment (seen under load): the engine
	// would then size the tiers for the default and the record could not
	// move. Wait until the new limit shows.
	eventually(t, "source limit visible", func() bool {
		rcs, err := e.adm.DescribeTopicConfigs(context.Background(), e.plan.Source)
		if err != nil {
			return false
		}
		rc, err := rcs.On(e.plan.Source, nil)
		if err != nil {
			return false
		}
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil && *c.Value == ls {
				return true
			}
		}
		return false
	})
	e.app.setAnswer(func(m *delivery.Message) error {
		if m.Attempt == 1 {
			return e503
		}
		return nil
	})
	big := &kgo.Record{Topic: e.plan.Source, Key: []byte("k"), Value: make([]byte, limit-200)}
	rand.NewChaCha8([32]byte{2}).Read(big.Value) // incompressible: brokers check the compressed batch
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ProducerBatchMaxBytes(2<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), big).FirstErr(); err != nil {
		t.Fatalf("the source takes the record: %v", err)
	}
	eng, _ := e.start(e.options(e.app))
	deadline := time.Now().Add(5 * time.Second)
	for e.app.numAcked() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if e.app.numAcked() == 0 {
		t.Errorf("a %d-byte record (source limit %d) never made it through its retry: %d deliveries, %d aborted transactions, %d retried",
			len(big.Value), limit, len(e.app.callsFor(id(e.plan.Source, 0, 0))), eng.Stats().Aborted.Load(), eng.Stats().Retried[0].Load())
	}
}

// Keys made of binary bytes, and the empty (non-null) key, are keys like
// any other in ordering key mode.
func TestBreakBinaryAndEmptyKeysPark(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	keys := []string{"", "\x00", "\x00\xff\xfe", "é\x00"}
	plan := map[string][]error{}
	var recs []*kgo.Record
	for i := range 3 {
		for j, k := range keys {
			v := fmt.Sprintf("k%d-v%d", j, i)
			if i == 0 {
				plan[v] = []error{e503}
			}
			recs = append(recs, rec(k, v))
		}
	}
	recs = append(recs, &kgo.Record{Value: []byte("null-key")})
	e.app.setAnswer(failing(plan))
	e.produce(recs...)
	eng, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
	eventually(t, "all acknowledged", func() bool { return e.app.numAcked() == len(recs) })
	for j, k := range keys {
		want := fmt.Sprintf("k%d-v0,k%d-v1,k%d-v2", j, j, j)
		var acked []string
		for _, v := range e.app.ackedValues(k) {
			if v != "null-key" { // ackedValues("") matches the null key too
				acked = append(acked, v)
			}
		}
		if got := strings.Join(acked, ","); got != want {
			t.Errorf("key %q acknowledged %s, want %s", k, got, want)
		}
	}
	eventually(t, "nothing blocked or parked", func() bool {
		return eng.Stats().BlockedKeys.Load() == 0 && eng.Stats().ParkedRecords.Load() == 0
	})
	eventually(t, "parking committed past every parked record", func() bool {
		return len(e.parkedAfterCommit(e.group(), retrytopics.ParkingTopic(e.plan.Source))) == 0
	})
}

// A source record that already starts with a full kretry header run (a DLQ
// record replayed to the source by hand) is a new original: its id is its
// own, and its headers reach the app unchanged on every attempt, parked or
// not.
func TestBreakSourceRecordWithKretryHeaderRun(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	forged := e.forgedTierRecord(1, 0, "K", "replayed", map[string]string{retrytopics.HeaderOriginalTopic: "elsewhere"})
	forged.Topic = e.plan.Source
	forged.Headers = append(forged.Headers, kgo.RecordHeader{Key: "trace", Value: []byte{0, 1}})
	parked := e.forgedTierRecord(1, 0, "K", "replayed-2", nil)
	parked.Topic = e.plan.Source
	e.app.setAnswer(failing(map[string][]error{"replayed": {e503}}))
	e.produce(forged, parked)
	e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
	eventually(t, "both acknowledged", func() bool { return e.app.numAcked() == 2 })
	for _, r := range []*kgo.Record{forged, parked} {
		cs := e.app.callsForValue(string(r.Value))
		for _, c := range cs {
			if c.msg.ID != id(e.plan.Source, 0, r.Offset) {
				t.Errorf("%s attempt %d: id %s, want %s", r.Value, c.msg.Attempt, c.msg.ID, id(e.plan.Source, 0, r.Offset))
			}
			if !sameHeaders(c.msg.Headers, r.Headers) {
				t.Errorf("%s attempt %d: headers changed: got %d headers, want %d", r.Value, c.msg.Attempt, len(c.msg.Headers), len(r.Headers))
			}
		}
	}
	if got := strings.Join(e.app.ackedValues("K"), ","); got != "replayed,replayed-2" {
		t.Errorf("acknowledged %s", got)
	}
}
