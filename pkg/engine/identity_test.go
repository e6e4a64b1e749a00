package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/flow"
)

// running is an engine started by runEngine; done is closed when Run has
// returned res.
type running struct {
	eng    *Engine
	cancel context.CancelFunc
	done   chan struct{}
	res    error
}

// stopped reports whether Run returned, and what.
func (r *running) stopped() (bool, error) {
	select {
	case <-r.done:
		return true, r.res
	default:
		return false, nil
	}
}

// runEngine runs an engine without failing the test on Run's error (the
// identity tests expect some); it is cancelled when the test ends.
func (e *env) runEngine(o Options) *running {
	e.t.Helper()
	eng, err := New(context.Background(), o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{eng: eng, cancel: cancel, done: make(chan struct{})}
	go func() { r.res = eng.Run(ctx); close(r.done) }()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			e.t.Error("engine did not stop within 30s")
		}
	})
	return r
}

// staticOptions are options for instance id with a session timeout long
// enough that only static membership (or an explicit leave) can explain a
// takeover faster than it.
func (e *env) staticOptions(d *recorder, instance string) Options {
	o := e.options(d)
	o.InstanceID, o.DynamicMembership = instance, false
	o.TransactionalID = "test-" + e.plan.Source + "-" + instance
	o.GroupOpts = []kgo.Opt{kgo.SessionTimeout(30 * time.Second), kgo.HeartbeatInterval(time.Second)}
	return o
}

// values are n records <prefix>0.. of keys k0.., spread over the env's
// partitions (record i on partition i mod partitions).
func (e *env) values(prefix string, n int, partitions int32) []*kgo.Record {
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%s%d", prefix, i), Partition: int32(i) % partitions})
	}
	return rs
}

// untilBothDeliver produces a round of records to every partition every
// 100ms until both instances have acknowledged some (the second one's join
// takes a rebalance; records produced before it are the first one's).
func (e *env) untilBothDeliver(a, b *recorder, partitions int32) {
	e.t.Helper()
	for round := 0; a.numAcked() == 0 || b.numAcked() == 0; round++ {
		if round == 150 {
			e.t.Fatalf("after 15s: acknowledged by the first instance %d, by the second %d; want both to own partitions", a.numAcked(), b.numAcked())
		}
		e.produce(e.values(fmt.Sprintf("r%d-", round), int(partitions), partitions)...)
		time.Sleep(100 * time.Millisecond)
	}
}

// An engine whose options leave InstanceID empty joins as a static member
// named for the host, as kretry run's do: a Go program embedding it gets
// the same takeover on restart without naming its instance.
func TestDefaultInstanceIDIsTheHostName(t *testing.T) {
	e := newEnv(t, 2)
	o := e.options(newRecorder())
	o.DynamicMembership = false
	r := e.runEngine(o)
	select {
	case <-r.eng.Joined():
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not join within 30s")
	}
	member, _ := r.eng.cl.Load().GroupMetadata()
	gs, err := e.adm.DescribeGroups(context.Background(), e.group())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range gs[e.group()].Members {
		if m.MemberID == member && m.InstanceID != nil {
			ids = append(ids, *m.InstanceID)
		}
	}
	if want := flow.DefaultInstanceID(); len(ids) != 1 || ids[0] != want {
		t.Errorf("the engine's member %q has instance ids %q, want [%q] (the host's name)", member, ids, want)
	}
}

// Two instances of one group with different instance ids share the
// partitions and neither dies.
func TestTwoInstanceIDsShareTheGroup(t *testing.T) {
	e := newEnv(t, 4)
	a, b := newRecorder(), newRecorder()
	ra := e.runEngine(e.staticOptions(a, "host-a"))
	rb := e.runEngine(e.staticOptions(b, "host-b"))
	e.untilBothDeliver(a, b, 4)
	for name, r := range map[string]*running{"a": ra, "b": rb} {
		if done, err := r.stopped(); done {
			t.Errorf("instance %s stopped: %v", name, err)
		}
	}
}

// The same instance id (and so the same transactional id) twice: the older
// instance is fenced and Run returns a *FencedError naming the id, the
// group and the key to change; the newer one delivers everything.
func TestSameInstanceIDTwiceFencesTheOlder(t *testing.T) {
	e := newEnv(t, 2)
	a, b := newRecorder(), newRecorder()
	ra := e.runEngine(e.staticOptions(a, "dup"))
	e.produce(e.values("v", 10, 2)...)
	eventually(t, "the first instance delivering", func() bool { return a.numAcked() >= 10 })
	e.runEngine(e.staticOptions(b, "dup"))
	e.produce(e.values("w", 10, 2)...)
	select {
	case <-ra.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the older instance was not fenced within 30s")
	}
	err := ra.res
	var fe *FencedError
	if !errors.As(err, &fe) || !errors.Is(err, ErrFenced) {
		t.Fatalf("Run = %v, want a *FencedError", err)
	}
	for _, want := range []string{`"dup"`, e.group(), "kafka.instance_id", "KRETRY_KAFKA__INSTANCE_ID"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	eventually(t, "every w record acknowledged by the newer instance", func() bool {
		n := 0
		for i := range 10 {
			if len(b.callsForValue(fmt.Sprintf("w%d", i))) > 0 {
				n++
			}
		}
		return n == 10
	})
}

// A killed instance restarted under the same instance id gets its
// partitions back at once: well before the 30s session timeout that a
// dynamic member's successor would wait.
func TestStaticRestartTakesPartitionsBackAtOnce(t *testing.T) {
	e := newEnv(t, 2)
	a, b := newRecorder(), newRecorder()
	_, _, kill := e.startKillable(e.staticOptions(a, "pod-0"))
	e.produce(e.values("v", 10, 2)...)
	eventually(t, "the first instance delivering", func() bool { return a.numAcked() >= 10 })
	kill()
	start := time.Now()
	e.runEngine(e.staticOptions(b, "pod-0"))
	e.produce(e.values("w", 4, 2)...)
	eventually(t, "the restarted instance delivering", func() bool { return len(b.callsForValue("w3")) > 0 })
	took := time.Since(start)
	t.Logf("restarted instance delivered %v after the kill (session timeout 30s)", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("took %v: the restart waited for the session timeout instead of taking its static membership back", took)
	}
}

// A static member stopped cleanly leaves the group: the other instance
// takes its partitions at once, not after the 30s session timeout.
func TestCleanStopOfStaticMemberHandsOver(t *testing.T) {
	e := newEnv(t, 2)
	a, b := newRecorder(), newRecorder()
	ra := e.runEngine(e.staticOptions(a, "pod-a"))
	e.runEngine(e.staticOptions(b, "pod-b"))
	e.untilBothDeliver(a, b, 2)
	ra.cancel()
	<-ra.done
	if ra.res != nil {
		t.Fatalf("clean stop: %v", ra.res)
	}
	start := time.Now()
	e.produce(e.values("w", 4, 2)...)
	eventually(t, "the other instance delivering every partition", deliveredAll(b, "w", 4))
	took := time.Since(start)
	t.Logf("the other instance delivered the stopped one's partitions %v after the stop (session timeout 30s)", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Errorf("took %v: the stopped static member did not leave the group", took)
	}
}

// A transaction that stalls past the transaction timeout (a broker outage)
// fails to end, and the producer is then stuck ("invalid attempt to begin a
// transaction while already in a transaction"), or its coordinator aborts it
// and bumps the epoch (PRODUCER_FENCED with no other instance). The engine
// rebuilds its session and goes on instead of exiting; the records after
// the last commit are delivered again and end up committed once.
func TestStalledTransactionRebuildsTheSession(t *testing.T) {
	e := newEnv(t, 1)
	a := newRecorder()
	o := e.staticOptions(a, "pod-0")
	o.txnTimeout = time.Second
	// v0 goes to the DLQ: its transaction writes a record, so the broker
	// holds it open (an offsets-only one starts at its End) and times it out.
	a.setAnswer(failing(map[string][]error{"v0": {e422}}))
	var stalled atomic.Bool
	o.beforeEnd = func() {
		if len(a.callsForValue("v0")) > 0 && stalled.CompareAndSwap(false, true) {
			time.Sleep(4 * time.Second) // past the timeout and the broker's 1s sweep
		}
	}
	r := e.runEngine(o)
	e.produce(e.values("v", 5, 1)...)
	eventually(t, "a transaction stalled", stalled.Load)
	e.produce(e.values("w", 5, 1)...)
	// Everything is committed in the end: the source's committed offset
	// reaches its end (10), and v0 is in the DLQ.
	deadline := time.Now().Add(30 * time.Second)
	for {
		offs, err := e.adm.FetchOffsets(context.Background(), e.group())
		if o, ok := offs.Lookup(e.plan.Source, 0); err == nil && ok && o.At == 10 {
			break
		}
		if done, err := r.stopped(); done {
			t.Fatalf("Run stopped after its producer was fenced by its coordinator: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source's committed offset did not reach 10 within 30s of the stall: %v %+v", err, offs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(e.readAll(e.plan.DLQ)); n != 1 {
		t.Errorf("the DLQ holds %d records, want v0 once", n)
	}
}
