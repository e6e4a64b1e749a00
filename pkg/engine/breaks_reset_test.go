package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/flow"
)

// Two transactions that stall past the transaction timeout within a minute
// (a broker outage that outlasts one reset, a coordinator moving twice in a
// rolling restart) with no other instance anywhere: the engine must rebuild
// its session again and go on, not stop with a *FencedError telling the
// operator that another instance took its instance id (kretry run would exit
// 1 blaming a duplicate that does not exist, and leave its static member
// behind). Across both resets nothing is lost, the DLQ holds its record
// once, and a key's parked records still follow their head in order.
func TestStalledTwiceWithinAMinuteGoesOn(t *testing.T) {
	e := newEnv(t, 1, 300*time.Millisecond)
	a := newRecorder()
	o := e.keyedOptions(a, flow.OnDeadLetterRelease)
	o.InstanceID, o.DynamicMembership = "pod-0", false
	o.TransactionalID = "test-" + e.plan.Source + "-pod-0"
	o.GroupOpts = []kgo.Opt{kgo.SessionTimeout(30 * time.Second), kgo.HeartbeatInterval(time.Second)}
	o.txnTimeout = time.Second
	// d0 goes to the DLQ (its transaction writes a record, so the broker
	// holds it open and times it out); K's head k0 fails once and waits in
	// the tier, k1..k3 park behind it.
	a.setAnswer(failing(map[string][]error{"d0": {e422}, "k0": {e503}}))
	var (
		mu      sync.Mutex
		stalls  int
		stalled int // deliveries of d0 when the last stall began
	)
	o.beforeEnd = func() {
		mu.Lock()
		defer mu.Unlock()
		// Stall the first transaction that moves d0, and the first one
		// that moves it again after the reset.
		if n := len(a.callsForValue("d0")); n > stalled && stalls < 2 {
			stalls++
			stalled = n
			time.Sleep(4 * time.Second) // past the timeout and the broker's 1s sweep
		}
	}
	r := e.runEngine(o)
	e.produce(rec("K", "k0"), rec("K", "k1"), rec("D", "d0"), rec("K", "k2"), rec("K", "k3"))
	deadline := time.Now().Add(60 * time.Second)
	for {
		offs, err := e.adm.FetchOffsets(context.Background(), e.group())
		if o, ok := offs.Lookup(e.plan.Source, 0); err == nil && ok && o.At == 5 && len(a.ackedValues("K")) == 4 {
			break
		}
		if done, err := r.stopped(); done {
			mu.Lock()
			n := stalls
			mu.Unlock()
			t.Fatalf("Run stopped after %d stalled transaction(s) with no other instance: %v", n, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("not drained within 60s: %v %+v, K acknowledged %v", err, offs, a.ackedValues("K"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	if stalls != 2 {
		t.Errorf("%d transactions stalled, want 2", stalls)
	}
	mu.Unlock()
	if got := a.ackedValues("K"); !slices.Equal(got, []string{"k0", "k1", "k2", "k3"}) {
		t.Errorf("K acknowledged in the order %v, want k0 k1 k2 k3", got)
	}
	if n := len(e.readAll(e.plan.DLQ)); n != 1 {
		t.Errorf("the DLQ holds %d records, want d0 once", n)
	}
}

// A transaction whose End runs out of time before it reaches EndTxn (its
// flush outlasts the transaction timeout, as in a broker outage): franz-go
// returns the context's error without aborting and without rewinding the
// consumer to the committed offsets, while the engine drops its state for
// those records. Nothing new arrives, so no later Begin fails and asks for a
// new session: the records after the last commit were then neither
// committed nor delivered again — until new records happened to come (or
// for good, on a quiet partition). They must be delivered again and
// committed without any new record.
func TestEndOutOfTimeIsDeliveredAgainWithoutNewRecords(t *testing.T) {
	e := newEnv(t, 1)
	a := newRecorder()
	o := e.staticOptions(a, "pod-0")
	o.txnTimeout = time.Second
	a.setAnswer(failing(map[string][]error{"v0": {e422}}))
	var stalled atomic.Bool
	o.beforeEnd = func() {
		if len(a.callsForValue("v0")) > 0 && stalled.CompareAndSwap(false, true) {
			time.Sleep(2 * time.Second) // the commit's context (the 1s transaction timeout) ends
		}
	}
	r := e.runEngine(o)
	e.produce(e.values("v", 5, 1)...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		offs, err := e.adm.FetchOffsets(context.Background(), e.group())
		if o, ok := offs.Lookup(e.plan.Source, 0); err == nil && ok && o.At == 5 {
			break
		}
		if done, err := r.stopped(); done {
			t.Fatalf("Run stopped: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("30s after the stall the source's committed offset is not at its end (5): %v %+v; v1 delivered %d time(s)", err, offs, len(a.callsForValue("v1")))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(e.readAll(e.plan.DLQ)); n != 1 {
		t.Errorf("the DLQ holds %d records, want v0 once", n)
	}
}
