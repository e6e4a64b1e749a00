package engine

// Attacks on the shared delivery deadlines (deadline.go, efa99f8): hung
// handlers abandoned exactly once, counts, answers at the abandon moment,
// tiny DeliveryTimeouts, shutdown and rebalance with hung handlers, and
// growth under a long stream.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// hungApp: attempt 1 of every record ignores its context and blocks until
// release; later attempts acknowledge. It counts calls and what the engine
// should have seen.
type hungApp struct {
	release  chan struct{}
	once     sync.Once
	started  atomic.Int64 // attempt-1 calls entered
	returned atomic.Int64 // attempt-1 calls returned (after release)
	mu       sync.Mutex
	calls    map[string][]int // id -> attempts seen
	acks     map[string]int   // id -> successful later attempts
}

func newHungApp(t *testing.T) *hungApp {
	a := &hungApp{release: make(chan struct{}), calls: map[string][]int{}, acks: map[string]int{}}
	t.Cleanup(a.free)
	return a
}

func (a *hungApp) free() { a.once.Do(func() { close(a.release) }) }

func (a *hungApp) Deliver(ctx context.Context, m *delivery.Message) error {
	a.mu.Lock()
	a.calls[m.ID] = append(a.calls[m.ID], m.Attempt)
	a.mu.Unlock()
	if m.Attempt == 1 {
		a.started.Add(1)
		<-a.release // ignores ctx
		a.returned.Add(1)
		return nil // a late success: must be ignored
	}
	a.mu.Lock()
	a.acks[m.ID]++
	a.mu.Unlock()
	return nil
}

func (a *hungApp) numAcked() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acks)
}

// TestCohortHungAbandonedExactlyOnce: N hung handlers, several cohorts,
// MaxInFlight larger than N: each is abandoned once (Failed == N), moved to
// the tier once (Retried == N), acknowledged once there (Delivered == N),
// and their late successes change nothing.
func TestCohortHungAbandonedExactlyOnce(t *testing.T) {
	for _, dt := range []time.Duration{time.Microsecond, time.Millisecond, 150 * time.Millisecond} {
		t.Run(dt.String(), func(t *testing.T) {
			const n = 40
			e := newEnv(t, 4, 100*time.Millisecond)
			app := newHungApp(t)
			o := e.options(app)
			o.MaxInFlight = 10000
			o.DeliveryTimeout = dt
			o.ShutdownGrace = time.Second
			eng, _ := e.start(o)
			recs := spread(n, 4)
			// two bursts, so there are at least two cohorts
			e.produce(recs[:n/2]...)
			time.Sleep(30 * time.Millisecond)
			e.produce(recs[n/2:]...)
			waitFor(t, "all retried records acked", 15*time.Second, func() bool { return app.numAcked() == n })
			waitFor(t, "InFlight 0", 5*time.Second, func() bool { return eng.stats.InFlight.Load() == 0 })
			waitFor(t, "Retried committed", 5*time.Second, func() bool { return eng.stats.Retried[0].Load() == n })
			app.free()
			waitFor(t, "hung handlers returned", 5*time.Second, func() bool { return app.returned.Load() == app.started.Load() })
			time.Sleep(100 * time.Millisecond) // let any wrongly applied late answer land
			if f, d, r := eng.stats.Failed.Load(), eng.stats.Delivered.Load(), eng.stats.Retried[0].Load(); f != n || d != n || r != n {
				t.Errorf("DeliveryTimeout %v: Failed %d Delivered %d Retried %d, want %d each", dt, f, d, r, n)
			}
			if got := eng.stats.InFlight.Load(); got != 0 {
				t.Errorf("InFlight %d after all finished", got)
			}
			if s := app.started.Load(); s != n {
				t.Errorf("attempt 1 called %d times, want %d", s, n)
			}
			app.mu.Lock()
			for id, at := range app.calls {
				if len(at) != 2 || at[0] != 1 || at[1] != 2 {
					t.Errorf("%s: attempts %v, want [1 2]", id, at)
				}
			}
			app.mu.Unlock()
		})
	}
}

// TestCohortAnswerAtTheAbandonMoment: handlers that ignore their context and
// answer about abandonAfter after it ended, so the answer races the
// watchdog. Each record must get exactly one outcome: its first answer
// (Delivered) or the abandonment (Failed, then acked from the tier).
func TestCohortAnswerAtTheAbandonMoment(t *testing.T) {
	const n = 60
	e := newEnv(t, 4, 50*time.Millisecond)
	var mu sync.Mutex
	first := map[string]int{}
	h := delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
		mu.Lock()
		first[m.ID]++
		i := len(first)
		mu.Unlock()
		if m.Attempt == 1 {
			<-ctx.Done()
			// abandonAfter, give or take up to 3ms
			time.Sleep(abandonAfter + time.Duration(i%7-3)*time.Millisecond)
		}
		return nil
	})
	o := e.options(h)
	o.MaxInFlight = 1000
	o.DeliveryTimeout = 50 * time.Millisecond
	eng, _ := e.start(o)
	e.produce(spread(n, 4)...)
	// every record ends: acked on attempt 1 (calls 1) or on attempt 2 (calls 2)
	waitFor(t, "every record delivered", 15*time.Second, func() bool {
		return eng.stats.Delivered.Load() >= n && eng.stats.InFlight.Load() == 0
	})
	waitFor(t, "retries committed", 5*time.Second, func() bool {
		return eng.stats.Retried[0].Load() == eng.stats.Failed.Load()
	})
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, c := range first {
		if c == 2 {
			twice++
		} else if c != 1 {
			t.Errorf("a record called %d times", c)
		}
	}
	d, f := eng.stats.Delivered.Load(), eng.stats.Failed.Load()
	t.Logf("answer won %d, watchdog won %d", n-twice, twice)
	if d != n || f != int64(twice) || eng.stats.Retried[0].Load() != int64(twice) {
		t.Errorf("Delivered %d Failed %d Retried %d; want %d, %d, %d", d, f, eng.stats.Retried[0].Load(), n, twice, twice)
	}
}

// TestCohortShutdownHungNothingLost: hung handlers on every partition, a
// huge DeliveryTimeout (only the hard stop ends the cohorts): Run returns
// within ShutdownGrace+1s, nothing is committed, and a restart delivers
// every record again.
func TestCohortShutdownHungNothingLost(t *testing.T) {
	const n = 16
	e := newEnv(t, 4)
	app := newHungApp(t)
	o := e.options(app)
	o.MaxInFlight = 1000
	o.DeliveryTimeout = time.Hour
	o.ShutdownGrace = 300 * time.Millisecond
	eng, stop, _, _ := e.launch(o)
	e.produce(spread(n, 4)...)
	waitFor(t, "all hung", 15*time.Second, func() bool { return app.started.Load() == n })
	t0 := time.Now()
	stop()
	if took := time.Since(t0); took > o.ShutdownGrace+time.Second+500*time.Millisecond {
		t.Errorf("Run returned %v after cancel (ShutdownGrace %v)", took, o.ShutdownGrace)
	}
	if got := eng.stats.InFlight.Load(); got != 0 {
		t.Errorf("InFlight %d after Run returned", got)
	}
	if d := eng.stats.Delivered.Load(); d != 0 {
		t.Errorf("Delivered %d, want 0", d)
	}
	app.free()
	// restart: every record comes again (attempt 1: the source)
	app2 := newRecorder()
	o2 := e.options(app2)
	o2.TransactionalID += "-2"
	e.start(o2)
	waitFor(t, "every record redelivered", 15*time.Second, func() bool { return app2.numAcked() == n })
}

// TestCohortRebalanceWhileHung: a second member joins while the first's
// handlers hang; every record is eventually acknowledged, none lost.
func TestCohortRebalanceWhileHung(t *testing.T) {
	const n = 24
	e := newEnv(t, 4, 100*time.Millisecond)
	app := newHungApp(t)
	o := e.options(app)
	o.MaxInFlight = 1000
	o.DeliveryTimeout = 300 * time.Millisecond
	e.start(o)
	e.produce(spread(n, 4)...)
	waitFor(t, "some hung", 15*time.Second, func() bool { return app.started.Load() >= n/2 })
	o2 := e.options(app)
	o2.TransactionalID += "-2"
	o2.MaxInFlight = 1000
	o2.DeliveryTimeout = 300 * time.Millisecond
	e.start(o2)
	waitFor(t, "every record acked from the tier", 20*time.Second, func() bool { return app.numAcked() == n })
}

// TestCohortKeyOrderWithHungHandlers: OrderingKey; the first record of each
// key hangs (ignores ctx) on its first attempt and is abandoned. The key's
// later records must be acknowledged after it, in order, each once.
func TestCohortKeyOrderWithHungHandlers(t *testing.T) {
	e := newEnv(t, 2, 100*time.Millisecond)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	h := delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
		if len(m.Value) > 0 && m.Value[len(m.Value)-1] == '0' && m.Attempt == 1 {
			<-release // ignores ctx; returns success late
			return nil
		}
		return e.app.Deliver(ctx, m)
	})
	o := e.keyedOptions(h, flow.OnDeadLetterHold)
	o.MaxInFlight = 1000
	o.DeliveryTimeout = 100 * time.Millisecond
	eng, _ := e.start(o)
	keys := []string{"a", "b", "c", "d"}
	var recs []*kgo.Record
	for i := range 5 {
		for j, k := range keys {
			r := rec(k, fmt.Sprintf("%s-%d", k, i))
			r.Partition = int32(j % 2)
			recs = append(recs, r)
		}
	}
	e.produce(recs...)
	waitFor(t, "every record acked", 20*time.Second, func() bool { return e.app.numAcked() == len(recs) })
	once.Do(func() { close(release) })
	time.Sleep(200 * time.Millisecond)
	for _, k := range keys {
		got := e.app.ackedValues(k)
		want := []string{k + "-0", k + "-1", k + "-2", k + "-3", k + "-4"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("key %s acked %v, want %v", k, got, want)
		}
	}
	e.app.mu.Lock()
	for id, n := range e.app.acked {
		if n != 1 {
			t.Errorf("%s acked %d times", id, n)
		}
	}
	e.app.mu.Unlock()
	if f := eng.stats.Failed.Load(); f != int64(len(keys)) {
		t.Errorf("Failed %d, want %d (one abandonment per key)", f, len(keys))
	}
}

// spread is n records of keys k0…k(n-1), values v0…v(n-1), round-robin over
// partitions 0…parts-1.
func spread(n, parts int) []*kgo.Record {
	var recs []*kgo.Record
	for i := range n {
		r := rec(fmt.Sprint("k", i), fmt.Sprint("v", i))
		r.Partition = int32(i % parts)
		recs = append(recs, r)
	}
	return recs
}
