package overload

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func breakerConfig() BreakerConfig {
	return BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 8 * time.Second, Probes: 3}
}

func newTestGate(t *testing.T, cfg Config) (*Gate, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 8
	}
	g := New(cfg)
	g.breaker.rand = func() float64 { return 0 } // no jitter: exact waits
	return g, &buf
}

func fail(key string) Outcome {
	return Outcome{Class: Transient, Key: key, ID: "orders/0/" + key, Answer: "503", Message: "status 503: busy"}
}

func success(key string) Outcome { return Outcome{Class: OK, Key: key, ID: "orders/0/" + key} }

func notFound(key string) Outcome {
	return Outcome{Class: Permanent, Key: key, ID: "orders/0/" + key, Answer: "404", Message: "status 404: no such route"}
}

// deliver admits one delivery at now and reports o for it.
func deliver(t *testing.T, g *Gate, now time.Time, retry bool, o Outcome) Verdict {
	t.Helper()
	tk, admitted := g.Admit(now, retry, 0)
	if !admitted {
		t.Fatalf("%v: delivery of %s not admitted (state %v)", now.Sub(t0), o.Key, g.Snapshot(now).State)
	}
	return g.Done(now, tk, o)
}

func TestBreakerOpensWhenManyKeysFail(t *testing.T) {
	g, log := newTestGate(t, Config{Breaker: breakerConfig()})
	for i := range 10 {
		deliver(t, g, t0, false, success(fmt.Sprint("s", i)))
	}
	// 10 successes, then failures of distinct keys: the 10th makes half
	// of the 20 in the window.
	for i := range 9 {
		if v := deliver(t, g, t0, false, fail(fmt.Sprint("k", i))); v != Count {
			t.Fatalf("failure %d before the threshold: %v, want Count (the attempt counts)", i, v)
		}
	}
	if v := deliver(t, g, t0, false, fail("k9")); v != Hold {
		t.Fatalf("the 10th failure of 10 keys: %v, want Hold", v)
	}
	s := g.Snapshot(t0)
	if s.State != Open || s.Reason != ReasonDependency || s.Opened[ReasonDependency] != 1 {
		t.Fatalf("snapshot %+v, want open for dependency once", s)
	}
	if _, ok := g.Admit(t0.Add(500*time.Millisecond), false, 0); ok {
		t.Error("admitted a delivery while open")
	}
	if !g.Paused(t0, false) || !g.Paused(t0, true) {
		t.Error("source and tiers not paused while open")
	}
	// The partitions resume a quarter of the wait early, so that fresh
	// records are fetched to probe with.
	if w, ok := g.Wake(t0); !ok || !w.Equal(t0.Add(750*time.Millisecond)) {
		t.Errorf("Wake = %v %v, want %v", w, ok, t0.Add(750*time.Millisecond))
	}
	if !g.Paused(t0.Add(700*time.Millisecond), false) || g.Paused(t0.Add(800*time.Millisecond), false) {
		t.Error("the source should resume 250ms before probing, not before")
	}
	if w, ok := g.Wake(t0.Add(800 * time.Millisecond)); !ok || !w.Equal(t0.Add(time.Second)) {
		t.Errorf("Wake after the resume = %v %v, want the probe time %v", w, ok, t0.Add(time.Second))
	}
	if n := strings.Count(log.String(), "breaker open"); n != 1 {
		t.Errorf("%d 'breaker open' lines, want 1:\n%s", n, log)
	}
}

func TestBreakerStaysClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		seq  func(i int) Outcome
	}{
		{"one key failing again and again", func(int) Outcome { return fail("poison") }},
		{"a third of the keys failing", func(i int) Outcome {
			if i%3 == 0 {
				return fail(fmt.Sprint("k", i))
			}
			return success(fmt.Sprint("k", i))
		}},
		{"permanent failures", func(i int) Outcome { return notFound(fmt.Sprint("k", i)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
			for i := range 200 {
				if v := deliver(t, g, t0.Add(time.Duration(i)*time.Millisecond), false, tc.seq(i)); v != Count {
					t.Fatalf("delivery %d: %v, want Count", i, v)
				}
			}
			if s := g.Snapshot(t0); s.State != Closed {
				t.Fatalf("state %v, want closed", s.State)
			}
		})
	}
}

func openBreaker(t *testing.T, g *Gate) {
	t.Helper()
	for i := 0; g.Snapshot(t0).State == Closed; i++ {
		deliver(t, g, t0, false, fail(fmt.Sprint("k", i)))
	}
	if s := g.Snapshot(t0); s.State != Open {
		t.Fatalf("state %v after 10 failures, want open", s.State)
	}
}

func TestBreakerProbesThenClosesGradually(t *testing.T) {
	g, log := newTestGate(t, Config{Breaker: breakerConfig(), MaxInFlight: 6})
	openBreaker(t, g)
	at := t0.Add(time.Second)
	var probes []Ticket
	for range 3 {
		tk, ok := g.Admit(at, false, len(probes))
		if !ok || !tk.probe {
			t.Fatalf("probe %d not admitted as a probe (%v)", len(probes), ok)
		}
		probes = append(probes, tk)
	}
	if _, ok := g.Admit(at, false, 3); ok {
		t.Fatal("a 4th delivery admitted while probing with 3 probes")
	}
	// One probe failing (a record failing for reasons of its own) does
	// not lose the round: 2 of 3 succeeding close the breaker.
	if v := g.Done(at, probes[0], fail("p0")); v != Probe {
		t.Fatalf("a failed probe: %v, want Probe (counts unless it dead-letters)", v)
	}
	if s := g.Snapshot(at); s.State != Probing {
		t.Fatalf("state %v after one failed probe of 3, want probing", s.State)
	}
	for i, tk := range probes[1:] {
		if v := g.Done(at, tk, success(fmt.Sprint("p", i))); v != Count {
			t.Fatalf("probe %d succeeded: %v, want Count", i, v)
		}
	}
	if s := g.Snapshot(at); s.State != Closed || s.Limit != 3 {
		t.Fatalf("after the probes: %+v, want closed with limit 3 (slow start)", s)
	}
	if _, ok := g.Admit(at, false, 3); ok {
		t.Error("slow start: a 4th concurrent delivery admitted right after closing")
	}
	for i := range 3 { // each success widens the limit by one, up to MaxInFlight
		deliver(t, g, at, false, success(fmt.Sprint("r", i)))
	}
	if s := g.Snapshot(at); s.Limit != 6 {
		t.Errorf("limit %d after 3 successes, want 6 (MaxInFlight)", s.Limit)
	}
	if _, ok := g.Admit(at, false, 5); !ok {
		t.Error("not back to MaxInFlight after the slow start")
	}
	for _, want := range []string{"breaker probing", "breaker closed"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestBreakerWaitDoublesPerFailedRound(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	openBreaker(t, g)
	at := t0
	for _, want := range []time.Duration{2, 4, 8, 8} { // Wait 1s doubling, MaxWait 8s
		at = at.Add(g.breaker.until.Sub(at))
		for i := range 2 { // 2 of 3 probes failing lose the round
			tk, ok := g.Admit(at, false, 0)
			if !ok {
				t.Fatalf("no probe at %v", at.Sub(t0))
			}
			if v := g.Done(at, tk, fail(fmt.Sprint("probe", i))); v != Probe {
				t.Fatalf("a failed probe: %v, want Probe", v)
			}
		}
		if got := g.breaker.until.Sub(at); got != want*time.Second {
			t.Errorf("wait after a failed round: %v, want %v", got, want*time.Second)
		}
	}
	// A delivery in flight from before the opening holds too.
	if v := g.Done(at, Ticket{}, fail("late")); v != Hold {
		t.Errorf("late failure while open: %v, want Hold", v)
	}
}

// TestOutageOfAnyLength drives the gate as the engine does, in a synctest
// bubble, through a 10-minute outage of a dependency with records that
// dead-letter after 3 failed attempts: nothing is dead-lettered, the
// attempts consumed stay bounded (the failures before the opening, then
// at most the probes of each round), and every record is delivered once
// it is back.
func TestOutageOfAnyLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3}, MaxInFlight: 4})
		start := time.Now()
		down := func() bool { return time.Since(start) < 10*time.Minute }
		pending := make([]string, 200)
		for i := range pending {
			pending[i] = fmt.Sprint("k", i)
		}
		consumed, delivered, deadLettered := 0, 0, 0
		attempts := map[string]int{}
		for len(pending) > 0 && time.Since(start) < time.Hour {
			key := pending[0]
			tk, admitted := g.Admit(time.Now(), false, 0)
			if !admitted {
				w, ok := g.Wake(time.Now())
				if !ok {
					t.Fatalf("refused with nothing to wait for at %v", time.Since(start))
				}
				time.Sleep(time.Until(w))
				continue
			}
			time.Sleep(10 * time.Millisecond) // the delivery
			o := success(key)
			if down() {
				o = fail(key)
			}
			v := g.Done(time.Now(), tk, o)
			switch {
			case o.Class == OK:
				pending = pending[1:]
				delivered++
			case v == Hold, v == Probe && attempts[key] == 2: // the engine holds a probe that would dead-letter
			case attempts[key] == 2:
				deadLettered++
				pending = pending[1:]
			default:
				attempts[key]++ // to the next tier: behind the others
				consumed++
				pending = append(pending[1:], key)
			}
		}
		rounds := g.breaker.rounds
		if deadLettered != 0 {
			t.Errorf("%d records dead-lettered by a 10-minute outage", deadLettered)
		}
		if consumed > 4+3*(rounds+1) {
			t.Errorf("%d attempts consumed in %d probe rounds, want at most 4 before the opening + 3 per round", consumed, rounds)
		}
		if delivered != 200 {
			t.Errorf("%d delivered, want 200", delivered)
		}
		t.Logf("10-minute outage: %d attempts consumed (%d probe rounds), %d delivered after it, done %v after the start", consumed, rounds, delivered, time.Since(start).Round(time.Second))
	})
}

func TestBreakerOpensForFewKeys(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	for i := range 4 {
		if v := deliver(t, g, t0, false, fail(fmt.Sprint("k", i))); v != Count {
			t.Fatalf("failure %d of 4 keys: %v, want Count", i, v)
		}
	}
	for range 3 { // the same keys again: counted once each
		deliver(t, g, t0, false, fail("k0"))
	}
	if v := deliver(t, g, t0, false, fail("k4")); v != Hold {
		t.Fatalf("the 5th key failing with no success: %v, want Hold (5 ≥ 0.5 × 20/2)", v)
	}
}

func TestHeldRecordFailingAgainDoesNotReopen(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	openBreaker(t, g)
	at := g.breaker.until
	for i := range 2 {
		tk, _ := g.Admit(at, false, 0)
		g.Done(at, tk, success(fmt.Sprint("fresh", i)))
	}
	if s := g.Snapshot(at); s.State != Closed {
		t.Fatalf("state %v, want closed", s.State)
	}
	// The records held during the outage come back and fail again (they
	// fail for reasons of their own): their attempts count, the breaker
	// stays closed.
	for i := range 30 {
		o := fail(fmt.Sprint("held", i))
		o.Again = true
		if v := deliver(t, g, at, false, o); v != Count {
			t.Fatalf("held record %d failing again: %v, want Count", i, v)
		}
	}
	if s := g.Snapshot(at); s.State != Closed {
		t.Errorf("state %v after held records failed again, want closed", s.State)
	}
}

func TestRetriesFailingWhileFirstAttemptsSucceed(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	for i := range 100 {
		retry := i%2 == 0 // every retry fails, every first attempt succeeds
		o := success(fmt.Sprint("f", i))
		if retry {
			o = fail(fmt.Sprint("r", i))
		}
		if v := deliver(t, g, t0, retry, o); v != Count {
			t.Fatalf("delivery %d: %v, want Count (fresh records succeed: no outage)", i, v)
		}
	}
	// A tier's burst of failing retries in a row, a first attempt having
	// succeeded just before (due retries go first): no outage.
	for i := range 40 {
		if v := deliver(t, g, t0, true, fail(fmt.Sprint("burst", i))); v != Count {
			t.Fatalf("burst retry %d: %v, want Count (a first attempt succeeded just before)", i, v)
		}
	}
	// Only retries flowing, all failing, and no first attempt succeeding
	// for the breaker's wait: after a window of them, they open it.
	at := t0.Add(breakerConfig().Wait)
	opened := -1
	for i := range 40 {
		if deliver(t, g, at, true, fail(fmt.Sprint("only", i))) == Hold {
			opened = i
			break
		}
	}
	if opened < 0 || opened > 20 {
		t.Errorf("retries alone failing opened the breaker at delivery %d, want within the window (20)", opened)
	}
}
