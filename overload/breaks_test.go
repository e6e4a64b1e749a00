package overload

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// TestExhaustedBeforeAnySuccessOpens (breaker pass, issue 11): a gate that
// has seen no success yet (a process restarted during an outage) opens at
// the first transient failure that would dead-letter its record, and
// holds it; once a delivery succeeded, the same failure counts (poison on
// its last tier is dead-lettered at once, as before).
func TestExhaustedBeforeAnySuccessOpens(t *testing.T) {
	last := fail("k1")
	last.Last = true
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	if v := deliver(t, g, t0, true, last); v != Hold {
		t.Errorf("first outcome an exhausting failure: verdict %v, want Hold (%d)", v, Hold)
	}
	if s := g.Snapshot(t0); s.State != Open || s.Opened[ReasonDependency] != 1 {
		t.Errorf("gate %+v, want open once for the dependency", s)
	}

	g, _ = newTestGate(t, Config{Breaker: breakerConfig()})
	if v := deliver(t, g, t0, false, success("k0")); v != Count {
		t.Fatalf("success: verdict %v", v)
	}
	if v := deliver(t, g, t0, true, last); v != Count {
		t.Errorf("an exhausting failure after a success: verdict %v, want Count (%d): poison is dead-lettered at once", v, Count)
	}
	if s := g.Snapshot(t0); s.State != Closed {
		t.Errorf("gate %+v, want closed", s)
	}
}

// TestGuardAfterHealthyTraffic (breaker pass, issue 11; found by the
// newcomer walk): after a minute of healthy traffic the app starts
// answering 404 to everything (a deploy that moved its route). The guard
// must stop after max_dead_letters, not once 404s are 90% of the whole
// window's deliveries (2700 after 300 successes).
func TestGuardAfterHealthyTraffic(t *testing.T) {
	guard := GuardConfig{Enabled: true, MaxDeadLetters: 5, Window: time.Minute, Share: 0.9}
	g, log := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard})
	at := t0
	for i := range 300 {
		at = at.Add(100 * time.Millisecond)
		if v := deliver(t, g, at, false, success(fmt.Sprint("ok", i))); v != Count {
			t.Fatalf("success %d: %v", i, v)
		}
	}
	counted := 0
	for i := range 100 {
		at = at.Add(10 * time.Millisecond)
		tk, ok := g.Admit(at, false, 0)
		if !ok {
			break
		}
		if g.Done(at, tk, notFound(fmt.Sprint("k", i))) == Count {
			counted++
		}
	}
	if counted != 5 {
		t.Errorf("%d records dead-lettered after healthy traffic, want 5 (max_dead_letters)", counted)
	}
	if s := g.Snapshot(at); s.State != Open || s.Reason != ReasonSystemic {
		t.Errorf("gate %+v, want open, systemic", s)
	}
	if !strings.Contains(log.String(), "dead_lettered=5") {
		t.Errorf("guard line:\n%s\nwant dead_lettered=5", log.String())
	}
}

// TestBreakerWaitNeverWraps (breaker pass, issue 11): long waits are
// valid config (breaker.wait 1m, breaker.max_wait up to the largest
// duration); the wait before a probe round must never wrap negative —
// a negative wait probes at once, round after round.
func TestBreakerWaitNeverWraps(t *testing.T) {
	for _, cfg := range []BreakerConfig{
		{Wait: time.Minute, MaxWait: 24 * 365 * time.Hour},
		{Wait: time.Second, MaxWait: time.Duration(math.MaxInt64)},
		{Wait: time.Duration(math.MaxInt64), MaxWait: time.Duration(math.MaxInt64)},
	} {
		b := newBreaker(cfg, 8, nil)
		for _, r := range []float64{0, 0.999} {
			b.rand = func() float64 { return r }
			prev := time.Duration(0)
			for n := range 40 {
				w := b.wait(n)
				if w < cfg.Wait || w < prev {
					t.Fatalf("wait %v, max_wait %v, jitter %v: round %d waits %v (round before: %v), want at least wait and never shorter", cfg.Wait, cfg.MaxWait, r, n, w, prev)
				}
				prev = w
			}
		}
	}
}

// TestBudgetWithoutFloorLetsRetriesThrough (breaker pass, issue 11; found
// by b12): a retry budget with no floor (min_per_second 0, which a Go
// program embedding the engine can set) on a quiet source: no first
// attempt ever comes, so retries alone can never be within the ratio.
// They must still get through, one per window at least, not wait for
// fresh traffic for ever.
func TestBudgetWithoutFloorLetsRetriesThrough(t *testing.T) {
	g, _ := newTestGate(t, Config{Budget: BudgetConfig{Ratio: 0.2, MinPerSecond: 0, Window: 10 * time.Second}})
	admitted := 0
	for i := range 60 { // a minute, a retry asked for every second
		at := t0.Add(time.Duration(i) * time.Second)
		if tk, ok := g.Admit(at, true, 0); ok {
			admitted++
			g.Done(at, tk, success(fmt.Sprint("r", i)))
		}
	}
	if admitted < 6 {
		t.Errorf("%d retries admitted in a minute on a quiet source with budget ratio 0.2 and no floor, want at least one per 10s window (6)", admitted)
	}
}
