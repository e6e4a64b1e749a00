package overload

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// closeBreaker lets the probes of the open breaker succeed at its probe
// time and returns that time.
func closeBreaker(t *testing.T, g *Gate, prefix string) time.Time {
	t.Helper()
	at := g.breaker.until
	for i := 0; g.Snapshot(at).State != Closed; i++ {
		tk, ok := g.Admit(at, false, 0)
		if !ok {
			t.Fatalf("%s: no probe admitted at %v (state %v)", prefix, at.Sub(t0), g.Snapshot(at).State)
		}
		g.Done(at, tk, success(fmt.Sprint(prefix, "-probe", i)))
	}
	return at
}

// failuresToOpen delivers failures of new keys at at until the breaker
// opens and returns how many it took (the last one held).
func failuresToOpen(t *testing.T, g *Gate, at time.Time, prefix string, most int) int {
	t.Helper()
	for i := 1; i <= most; i++ {
		if v := deliver(t, g, at, false, fail(fmt.Sprint(prefix, "-", i))); v == Hold {
			return i
		}
	}
	t.Fatalf("%s: the breaker did not open after %d failures of distinct keys", prefix, most)
	return 0
}

// TestReopeningNeedsMoreEvidence: each reopening soon after a close
// doubles the window that must fail before the next one, up to 16×; the
// wait before probing stays the first one; a whole window closed ends the
// episode and the breaker is as sensitive as before.
func TestReopeningNeedsMoreEvidence(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()}) // window 20, ratio 0.5, wait 1s
	openBreaker(t, g)
	for i, want := range []int{10, 20, 40, 80, 160, 160, 160} {
		at := closeBreaker(t, g, fmt.Sprint("close", i))
		if got := failuresToOpen(t, g, at, fmt.Sprint("burst", i), 1000); got != want {
			t.Errorf("reopening %d: opened after %d failures, want %d (half of 20·2^%d, at most 16×)", i+1, got, want, min(i, 4))
		}
		if w := g.breaker.until.Sub(at); w != time.Second {
			t.Errorf("reopening %d: wait %v, want the first wait 1s (the probes had succeeded)", i+1, w)
		}
	}
	at := closeBreaker(t, g, "last")
	// A whole window of the size it needed (320 after 4 reopenings) with
	// fewer than half failing: the episode is over.
	for i := range 320 {
		o := success(fmt.Sprint("ok", i))
		if i%4 == 0 {
			o = fail(fmt.Sprint("some", i))
		}
		if v := deliver(t, g, at, false, o); v != Count {
			t.Fatalf("delivery %d after the close: %v, want Count (a quarter failing)", i, v)
		}
	}
	if g.breaker.recovering || g.breaker.relapses != 0 || g.breaker.first.size != 20 {
		t.Fatalf("after a closed window of 320: recovering %v, reopenings %d, window %d; want false, 0, 20",
			g.breaker.recovering, g.breaker.relapses, g.breaker.first.size)
	}
	// The window kept its last 20 (5 failures): 5 more keys failing open it.
	if got := failuresToOpen(t, g, at, "outage", 100); got != 7 {
		t.Errorf("a new outage after the episode opened it after %d failures, want 7 (10 of the last 20, of which 5 failed, the oldest first to leave)", got)
	}
}

// TestReopeningAfterAFailedProbeRound: an opening that follows a lost
// probe round is the same episode, not a reopening: the waits double as
// before and the window is not widened by it.
func TestReopeningAfterAFailedProbeRound(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	openBreaker(t, g)
	at := g.breaker.until
	for i := range 2 {
		tk, _ := g.Admit(at, false, 0)
		g.Done(at, tk, fail(fmt.Sprint("probe", i)))
	}
	if g.breaker.relapses != 0 {
		t.Errorf("a lost probe round counted as %d reopenings, want 0", g.breaker.relapses)
	}
	at = closeBreaker(t, g, "back")
	if got := failuresToOpen(t, g, at, "again", 100); got != 10 {
		t.Errorf("after one episode's close: opened after %d failures, want 10 (a whole window of 20)", got)
	}
}

// TestSynchronisedFailureAmongHealthyTraffic drives the gate as the
// engine does, one delivery at a time in a synctest bubble: 300 records
// of 300 keys, each failing the first time it is delivered, in front of
// 1000 healthy records; probes go to the newest fresh record, as the
// engine's freshFirst does. Without hysteresis the breaker opened once
// per window of the block (30 times here); with it, 5.
func TestSynchronisedFailureAmongHealthyTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{Breaker: breakerConfig(), MaxInFlight: 4})
		type rec struct {
			key          string
			burst, again bool
		}
		var queue []rec // in offset order
		for i := range 300 {
			queue = append(queue, rec{key: fmt.Sprint("burst", i), burst: true})
		}
		for i := range 1000 {
			queue = append(queue, rec{key: fmt.Sprint("healthy", i)})
		}
		failed := map[string]bool{}
		var tier []rec
		delivered := 0
		for len(queue)+len(tier) > 0 {
			if len(queue) == 0 {
				queue, tier = tier, nil // the tier comes due: its records succeed
			}
			probing := g.Probing(time.Now())
			tk, ok := g.Admit(time.Now(), false, 0)
			if !ok {
				w, ok := g.Wake(time.Now())
				if !ok {
					t.Fatal("refused with nothing to wait for")
				}
				time.Sleep(time.Until(w))
				continue
			}
			i := 0
			if probing { // the newest record not yet delivered
				for i = len(queue) - 1; i > 0 && (queue[i].again || failed[queue[i].key]); i-- {
				}
			}
			r := queue[i]
			queue = append(queue[:i:i], queue[i+1:]...)
			time.Sleep(time.Millisecond)
			o := success(r.key)
			if r.burst && !failed[r.key] {
				failed[r.key] = true
				o = fail(r.key)
			}
			o.Again = r.again
			switch v := g.Done(time.Now(), tk, o); {
			case o.Class == OK:
				delivered++
			case v == Hold:
				r.again = true
				queue = append([]rec{r}, queue...)
			default:
				tier = append(tier, r)
			}
		}
		s := g.Snapshot(time.Now())
		if delivered != 1300 || s.State != Closed {
			t.Fatalf("%d of 1300 delivered, breaker %v", delivered, s.State)
		}
		if n := s.Opened[ReasonDependency]; n > 6 {
			t.Errorf("the breaker opened %d times for one block of 300 failing records, want at most 6 (10+10+20+40+80+160 > 300)", n)
		}
		t.Logf("the breaker opened %d times, held %d deliveries", s.Opened[ReasonDependency], s.Held)
	})
}
