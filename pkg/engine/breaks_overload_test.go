package engine

// A breaker pass on issue 11's overload controls (docs/OVERLOAD.md): the
// scenarios a hostile world tries that the author's tests did not. Each
// runs on both brokers (see main_test.go).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/testlog"
	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// TestBreakRestartsDuringAnOutageDeadLetterNothing: the app answers 503
// for longer than the whole tier chain (one 300ms tier), and the process
// is restarted three times while the breaker is open (a crash loop, or a
// deploy during the outage). Each new process starts with a closed
// breaker and no evidence; the records it fails before its breaker opens
// again must not walk the tiers into the DLQ: issue 11's "an outage of
// any length dead-letters nothing by itself". When the app returns every
// record is delivered and the DLQ is empty.
func TestBreakRestartsDuringAnOutageDeadLetterNothing(t *testing.T) {
	for _, restarts := range []int{0, 3} {
		t.Run(fmt.Sprintf("restarts=%d", restarts), func(t *testing.T) { testRestartsDuringAnOutage(t, restarts) })
	}
}

func testRestartsDuringAnOutage(t *testing.T, restarts int) {
	e := newEnv(t, 3, 300*time.Millisecond)
	var down atomic.Bool
	down.Store(true)
	e.app.setAnswer(func(*delivery.Message) error {
		if down.Load() {
			return &delivery.StatusError{Status: 503, Body: "unavailable"}
		}
		return nil
	})
	const n = 60
	e.produce(keyed(n, 3)...)
	var engs []*Engine
	deadLettered := func() (n int64) {
		for _, eng := range engs {
			n += eng.Stats().Exhausted.Load() + eng.Stats().Permanent.Load()
		}
		return n
	}
	for i := range restarts + 1 {
		o, g, logs := e.gated(e.app, true)
		o.GroupOpts = fastGroup
		eng, stop := e.start(o)
		engs = append(engs, eng)
		eventually(t, "the breaker open", func() bool { return g.Snapshot(time.Now()).Opened[overload.ReasonDependency] > 0 })
		// Two lost rounds (200ms + 400ms): the records moved to the tier
		// before the breaker opened are due, held by the open breaker.
		eventually(t, "two failed probe rounds", func() bool { return strings.Count(logs.String(), "a probe failed") >= 2 })
		if i < restarts {
			stop() // the next process knows nothing of this one's breaker
		}
	}
	down.Store(false)
	eventually(t, "every record acknowledged or dead-lettered", func() bool { return e.app.numAcked()+int(deadLettered()) == n })
	if d := deadLettered(); d != 0 {
		t.Errorf("%d of %d records dead-lettered by an outage with %d restarts; an outage must dead-letter nothing", d, n, restarts)
	}
}

// defaultGate returns options with a gate configured as kretry's defaults
// (docs/OVERLOAD.md: window 20, failure_ratio 0.5, wait 1s, max_wait 1m,
// probes 3, guard 10 / 1m / 0.9) and a log the test can read.
func (e *env) defaultGate(d delivery.Deliverer) (Options, *overload.Gate, *testlog.Buffer) {
	o, _, logs := e.gated(d, true)
	g := overload.New(overload.Config{
		Breaker:     overload.BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: time.Minute, Probes: 3},
		Guard:       overload.GuardConfig{Enabled: true, MaxDeadLetters: 10, Window: time.Minute, Share: 0.9},
		MaxInFlight: o.MaxInFlight,
		Logger:      o.Logger,
	})
	o.Overload = g
	return o, g, logs
}

// TestBreakFlappingAppDeadLettersNothing: the app is up for 1s and down
// (503) for 1s, for 30s, while 100 fresh records a second arrive, with
// short tiers (2s, 5s: the chain is shorter than the flapping). No record
// may be dead-lettered by the flapping (issue 11: an outage of any length
// dead-letters nothing by itself), deliveries stay bounded (no retry
// storm: at most 4 per record on average) and the breaker opens a bounded
// number of times.
func TestBreakFlappingAppDeadLettersNothing(t *testing.T) {
	e := newEnv(t, 3, 2*time.Second, 5*time.Second)
	start := time.Now()
	up := func() bool { return time.Since(start) > 30*time.Second || time.Since(start)/time.Second%2 == 0 }
	e.app.setAnswer(func(*delivery.Message) error {
		if up() {
			return nil
		}
		return &delivery.StatusError{Status: 503, Body: "flapping"}
	})
	o, g, _ := e.defaultGate(e.app)
	o.MaxInFlight = 16
	eng, _ := e.start(o)
	<-eng.Joined()
	total := 0
	for time.Since(start) < 30*time.Second {
		var recs []*kgo.Record
		for i := range 10 {
			r := rec(fmt.Sprintf("k%d", total+i), "v")
			r.Partition = int32(i % 3)
			recs = append(recs, r)
		}
		total += len(recs)
		e.produce(recs...)
		time.Sleep(100 * time.Millisecond)
	}
	settled := func() int64 {
		return int64(e.app.numAcked()) + eng.Stats().Exhausted.Load() + eng.Stats().Permanent.Load()
	}
	deadline := time.Now().Add(90 * time.Second)
	for settled() < int64(total) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	s := g.Snapshot(time.Now())
	calls := e.app.numCalls()
	t.Logf("%d records, %d deliveries (%.2f per record), acked %d, exhausted %d; breaker opened %d times, held %d",
		total, calls, float64(calls)/float64(total), e.app.numAcked(), eng.Stats().Exhausted.Load(), s.Opened[overload.ReasonDependency], s.Held)
	if got := settled(); got != int64(total) {
		t.Fatalf("%d of %d records settled within 90s of the app's recovery", got, total)
	}
	if n := eng.Stats().Exhausted.Load(); n != 0 {
		t.Errorf("%d records dead-lettered as exhausted by an app flapping 1s up, 1s down", n)
	}
	if calls > 4*total {
		t.Errorf("%d deliveries for %d records: a retry storm", calls, total)
	}
	if n := s.Opened[overload.ReasonDependency]; n > 30 {
		t.Errorf("the breaker opened %d times in 30s of flapping, want at most 30", n)
	}
}

// TestBreakPoisonDuringAnOutage: one key fails for good — 422, or 503 on
// every attempt — while the dependency is down (503 for everything else)
// for longer than the tier chain, with fresh records arriving. After the
// app returns, the poison key's records are in the DLQ (permanent, or
// exhausted), every healthy record is acknowledged, and nothing else was
// dead-lettered (issue 11: genuine poison still dead-lettered; an outage
// dead-letters nothing).
func TestBreakPoisonDuringAnOutage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		poison error
		class  string
	}{
		{"422", &delivery.StatusError{Status: 422, Body: "bad order"}, "permanent"},
		{"503 for ever", &delivery.StatusError{Status: 503, Body: "this key never works"}, "exhausted"},
	} {
		t.Run(tc.name, func(t *testing.T) { testPoisonDuringAnOutage(t, tc.poison, tc.class) })
	}
}

func testPoisonDuringAnOutage(t *testing.T, poison error, class string) {
	e := newEnv(t, 3, 300*time.Millisecond, 600*time.Millisecond)
	var down atomic.Bool
	down.Store(true)
	e.app.setAnswer(func(m *delivery.Message) error {
		switch {
		case string(m.Key) == "poison":
			return poison
		case down.Load():
			return &delivery.StatusError{Status: 503, Body: "unavailable"}
		}
		return nil
	})
	o, g, _ := e.defaultGate(e.app)
	eng, _ := e.start(o)
	<-eng.Joined()
	healthy, poisoned := 0, 0
	produce := func(n int) {
		var recs []*kgo.Record
		for i := range n {
			r := rec(fmt.Sprintf("k%d", healthy), "v")
			if i%10 == 0 {
				r.Key = []byte("poison")
				poisoned++
			} else {
				healthy++
			}
			r.Partition = 0 // the poison key's records on one partition, in order
			if i%10 != 0 {
				r.Partition = int32(i % 3)
			}
			recs = append(recs, r)
		}
		e.produce(recs...)
	}
	start := time.Now()
	for time.Since(start) < 4*time.Second { // twice the tier chain and its probe waits
		produce(20)
		time.Sleep(200 * time.Millisecond)
	}
	if s := g.Snapshot(time.Now()); s.Opened[overload.ReasonDependency] == 0 {
		t.Fatalf("the breaker never opened during the outage: %+v", s)
	}
	down.Store(false)
	deadLettered := func() int64 { return eng.Stats().Exhausted.Load() + eng.Stats().Permanent.Load() }
	deadline := time.Now().Add(60 * time.Second)
	for (e.app.numAcked() < healthy || deadLettered() < int64(poisoned)) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if e.app.numAcked() != healthy {
		t.Errorf("%d of %d healthy records acknowledged", e.app.numAcked(), healthy)
	}
	dlq := e.readAll(e.plan.DLQ)
	other := 0
	for _, r := range dlq {
		cls, _ := header(r, "kretry-error-class")
		if string(r.Key) != "poison" || cls != class {
			other++
			t.Errorf("DLQ holds %s/%s (class %q): only the poison key's records belong there, as %s", r.Key, r.Value, cls, class)
		}
	}
	if len(dlq)-other != poisoned {
		t.Errorf("the DLQ holds %d of the poison key's %d records", len(dlq)-other, poisoned)
	}
	t.Logf("%d healthy records, %d poison; DLQ %d; gate %+v", healthy, poisoned, len(dlq), g.Snapshot(time.Now()))
}

// TestBreakExpiryWhileHeld: records of 30 keys arrive while the app
// answers 503; the breaker opens and holds them (or they wait in the
// tier); max_age (2s) passes during the outage. Each expires as
// documented — dead-lettered as "expired", or dropped and committed — and
// is counted in the gate's Expired; none is delivered after it expired,
// none is dead-lettered as exhausted, with ordering key (parking) in play.
func TestBreakExpiryWhileHeld(t *testing.T) {
	for _, action := range []string{OnExpiredDeadLetter, OnExpiredDrop} {
		t.Run(action, func(t *testing.T) {
			e := newEnv(t, 3, 300*time.Millisecond)
			var down atomic.Bool
			down.Store(true)
			e.app.setAnswer(func(*delivery.Message) error {
				if down.Load() {
					return &delivery.StatusError{Status: 503, Body: "unavailable"}
				}
				return nil
			})
			o, g, logs := e.gated(e.app, true)
			o.Ordering, o.ParkingTopic = flow.OrderingKey, retrytopics.ParkingTopic(e.plan.Source)
			o.MaxAge, o.OnExpired = 2*time.Second, action
			const n = 30
			e.produce(keyed(n, 3)...)
			produced := time.Now()
			eng, _ := e.start(o)
			eventually(t, "the breaker open", func() bool { return g.Snapshot(time.Now()).Opened[overload.ReasonDependency] > 0 })
			waitLong(t, time.Minute, "every record expired", func() bool { return g.Snapshot(time.Now()).Expired[action] == n })
			down.Store(false)
			e.app.mu.Lock()
			calls := slices.Clone(e.app.calls)
			e.app.mu.Unlock()
			for _, c := range calls {
				if c.at.Sub(produced) > 2*time.Second+500*time.Millisecond {
					t.Errorf("%s delivered %v after it was produced, past max_age 2s", c.msg.ID, c.at.Sub(produced))
				}
			}
			if ex := eng.Stats().Exhausted.Load(); ex != 0 {
				t.Errorf("%d records dead-lettered as exhausted", ex)
			}
			waitLong(t, time.Minute, "every record committed", func() bool {
				off, err := e.adm.FetchOffsets(context.Background(), e.group())
				if err != nil {
					return false
				}
				var sum int64
				for p := range int32(3) {
					if c, ok := off.Lookup(e.plan.Source, p); ok {
						sum += c.At
					}
				}
				return sum == n
			})
			dlq := e.readAll(e.plan.DLQ)
			want := n
			if action == OnExpiredDrop {
				want = 0
			}
			if len(dlq) != want {
				t.Errorf("the DLQ holds %d records, want %d (on_expired %s)", len(dlq), want, action)
			}
			for _, r := range dlq {
				if cls, _ := header(r, retrytopics.HeaderErrorClass); cls != "expired" {
					t.Errorf("DLQ record %s: class %q, want expired", r.Value, cls)
				}
			}
			if !strings.Contains(logs.String(), "records older than max_age are not delivered") {
				t.Errorf("no expiry line in the log")
			}
		})
	}
}

// waitLong is eventually with a bound of its own, for waits that include
// transactions on a loaded Kafka broker.
func waitLong(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", bound, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBreakGuardAfterHealthyTraffic (found by the newcomer walk): 300
// records are acknowledged, then the app answers 404 to everything (a
// deploy moved its route). At most guard.max_dead_letters (5 here) of the
// next 300 records, of 50 keys, reach the DLQ, the guard's line says so,
// and once the app is fixed every other record is delivered.
func TestBreakGuardAfterHealthyTraffic(t *testing.T) {
	e := newEnv(t, 3, time.Hour)
	var broken atomic.Bool
	e.app.setAnswer(func(*delivery.Message) error {
		if broken.Load() {
			return &delivery.StatusError{Status: 404, Body: "no such route"}
		}
		return nil
	})
	o, g, logs := e.gated(e.app, true)
	eng, _ := e.start(o)
	<-eng.Joined()
	produce := func(prefix string, n int) {
		var recs []*kgo.Record
		for i := range n {
			r := rec(fmt.Sprintf("%s%d", prefix, i%50), "v")
			r.Partition = int32(i % 3)
			recs = append(recs, r)
		}
		e.produce(recs...)
	}
	produce("healthy-", 300)
	eventually(t, "300 records acknowledged", func() bool { return e.app.numAcked() == 300 })
	broken.Store(true)
	produce("after-", 300)
	eventually(t, "the guard tripped", func() bool { return g.Snapshot(time.Now()).Opened[overload.ReasonSystemic] > 0 })
	broken.Store(false)
	waitLong(t, time.Minute, "every record acknowledged or dead-lettered", func() bool {
		return e.app.numAcked()+int(eng.Stats().Permanent.Load()) == 600
	})
	if dl := eng.Stats().Permanent.Load(); dl > 5 {
		t.Errorf("%d records dead-lettered after healthy traffic, want at most 5 (max_dead_letters)", dl)
	}
	if !strings.Contains(logs.String(), "guard: the same permanent answer") {
		t.Errorf("no guard line in the log")
	}
}

// TestBreakHangingAndThrottlingApp: for 4s the app either hangs past the
// delivery timeout (2s) or answers 429 with Retry-After: 1s, to every
// record, with short tiers (300ms, 600ms: the chain is shorter than the
// trouble). Nothing is dead-lettered, the deliveries stay bounded (no
// retry storm: at most 3 per record on average) and so do the openings;
// after the trouble every record is acknowledged.
func TestBreakHangingAndThrottlingApp(t *testing.T) {
	for _, tc := range []struct {
		name    string
		trouble func(ctx context.Context) error
	}{
		{"hang past the timeout", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{"429 Retry-After 1s", func(context.Context) error {
			return &delivery.StatusError{Status: 429, RetryAfter: time.Second, Body: "slow down"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 3, 300*time.Millisecond, 600*time.Millisecond)
			start := time.Now()
			o, g, _ := e.gated(deliverFunc(func(ctx context.Context, m *delivery.Message) error {
				if time.Since(start) < 4*time.Second {
					return tc.trouble(ctx)
				}
				return e.app.Deliver(ctx, m)
			}), true)
			const n = 60
			e.produce(keyed(n, 3)...)
			eng, _ := e.start(o)
			waitLong(t, time.Minute, "every record acknowledged or dead-lettered", func() bool {
				return e.app.numAcked()+int(eng.Stats().Exhausted.Load()+eng.Stats().Permanent.Load()) == n
			})
			s := g.Snapshot(time.Now())
			t.Logf("%d deliveries acknowledged after the trouble, %d failed; breaker opened %d times, held %d",
				e.app.numCalls(), eng.Stats().Failed.Load(), s.Opened[overload.ReasonDependency], s.Held)
			if d := eng.Stats().Exhausted.Load() + eng.Stats().Permanent.Load(); d != 0 {
				t.Errorf("%d records dead-lettered by an app that %s for 4s", d, tc.name)
			}
			if f := eng.Stats().Failed.Load(); f > 2*n {
				t.Errorf("%d failed deliveries for %d records in 4s of trouble: a retry storm", f, n)
			}
			if k := s.Opened[overload.ReasonDependency]; k == 0 || k > 10 {
				t.Errorf("the breaker opened %d times, want 1 to 10", k)
			}
		})
	}
}

// deliverFunc adapts a function to delivery.Deliverer.
type deliverFunc func(context.Context, *delivery.Message) error

func (f deliverFunc) Deliver(ctx context.Context, m *delivery.Message) error { return f(ctx, m) }
