package overload

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// heldLast is a record held in an outage, on its last tier, failing again
// transiently: routed, it would be dead-lettered as exhausted.
func heldLast(key string) Outcome { o := fail(key); o.Again, o.Last = true, true; return o }

func heldOK(key string) Outcome { o := success(key); o.Again = true; return o }

const againLine = "a record on its last tier failed and no fresh record succeeded since the breaker closed"

// TestHeldRecordsWhenTheDependencyIsDownAgain (a breaker helper's gate rig,
// 7 December: 50 of 50 dead-lettered): an outage held 50 records on their
// last tier; its probes, held records, succeed and close it; the
// dependency goes down again 0.5s later for 4.5s, and only held records
// flow. None may be dead-lettered: the first to fail opens the breaker
// again, and all 50 are delivered once the dependency is back.
func TestHeldRecordsWhenTheDependencyIsDownAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, log := newTestGate(t, Config{Breaker: breakerConfig(), MaxInFlight: 4})
		start := time.Now()
		for i := 0; g.Snapshot(start).State == Closed; i++ {
			deliver(t, g, start, false, fail(fmt.Sprint("k", i)))
		}
		up := func() bool {
			e := time.Since(start)
			return e < 1500*time.Millisecond || e >= 6*time.Second
		}
		pending := make([]string, 50)
		for i := range pending {
			pending[i] = fmt.Sprint("held", i)
		}
		delivered, deadLettered := 0, 0
		for len(pending) > 0 && time.Since(start) < time.Minute {
			tk, admitted := g.Admit(time.Now(), true, 0)
			if !admitted {
				w, _ := g.Wake(time.Now())
				time.Sleep(time.Until(w))
				continue
			}
			time.Sleep(50 * time.Millisecond) // the delivery
			o := heldLast(pending[0])
			if up() {
				o = heldOK(pending[0])
			}
			switch v := g.Done(time.Now(), tk, o); {
			case o.Class == OK:
				delivered++
				pending = pending[1:]
			case v == Hold, v == Probe: // a probe that would dead-letter is held
			default:
				deadLettered++
				pending = pending[1:]
			}
		}
		if deadLettered != 0 || delivered != 50 {
			t.Errorf("%d dead-lettered, %d delivered; want 0 and 50", deadLettered, delivered)
		}
		if s := g.Snapshot(time.Now()); s.Opened[ReasonDependency] != 2 {
			t.Errorf("opened %v for the dependency, want twice", s.Opened)
		}
		if !strings.Contains(log.String(), againLine) {
			t.Errorf("no line says why it opened again:\n%s", log)
		}
	})
}

// closeOnProbes opens the breaker on fresh failures and closes it with
// the next round's probes answering os.
func closeOnProbes(t *testing.T, g *Gate, os ...Outcome) time.Time {
	t.Helper()
	openBreaker(t, g)
	at := playRound(t, g, os...)
	wantState(t, g, at, Closed)
	return at
}

// TestHeldRecordAfterAFreshSuccessCounts: once a fresh record succeeded
// after the close, the dependency serves records it has not seen; a held
// record failing on its last tier fails on its own and is dead-lettered
// (Count), as before.
func TestHeldRecordAfterAFreshSuccessCounts(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	at := closeOnProbes(t, g, heldOK("h0"), heldOK("h1"))
	deliver(t, g, at, false, success("fresh"))
	if v := deliver(t, g, at, true, heldLast("h2")); v != Count {
		t.Errorf("held record failing after a fresh success: %v, want Count", v)
	}
	wantState(t, g, at, Closed)

	// Probes that were fresh records do not count: the held record's
	// failure still opens it.
	g, _ = newTestGate(t, Config{Breaker: breakerConfig()})
	at = closeOnProbes(t, g, acknowledged("p", 2)...)
	if v := deliver(t, g, at, true, heldLast("h2")); v != Hold {
		t.Errorf("held record failing after the close on fresh probes: %v, want Hold", v)
	}
	wantState(t, g, at, Open)

	// So does a retry's on its last tier, held or not: due while the
	// breaker was open, it is delivered after the close as the held ones.
	g, _ = newTestGate(t, Config{Breaker: breakerConfig()})
	at = closeOnProbes(t, g, heldOK("h0"), heldOK("h1"))
	o := fail("retry")
	o.Last = true
	if v := deliver(t, g, at, true, o); v != Hold {
		t.Errorf("retry on its last tier failing before any fresh success since the close: %v, want Hold", v)
	}
	wantState(t, g, at, Open)

	// Its failure not on its last tier moves it to a tier: no evidence.
	g, _ = newTestGate(t, Config{Breaker: breakerConfig()})
	at = closeOnProbes(t, g, heldOK("h0"), heldOK("h1"))
	o = heldLast("h2")
	o.Last = false
	if v := deliver(t, g, at, true, o); v != Count {
		t.Errorf("held record failing, not on its last tier: %v, want Count", v)
	}
	wantState(t, g, at, Closed)
}

// TestLastTierBeforeAnyOutageCounts: with no outage yet there is no close
// to doubt; a retry's success proves the dependency (see Outcome.Last) and
// a last-tier failure after it counts.
func TestLastTierBeforeAnyOutageCounts(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	deliver(t, g, t0, true, success("retry0"))
	o := fail("retry1")
	o.Last = true
	if v := deliver(t, g, t0, true, o); v != Count {
		t.Errorf("last-tier failure after a retry's success, no outage yet: %v, want Count", v)
	}
	wantState(t, g, t0, Closed)
}

// TestHeldRecordOpensAgainOnce: a held record that fails for reasons of
// its own, delivered first after the close, opens the breaker once;
// closed again by fresh probes, its next failure counts. The reopening is
// no relapse: a dependency down again afterwards opens the breaker on as
// few failures as without it.
func TestHeldRecordOpensAgainOnce(t *testing.T) {
	downAgain := func(poison bool) (routed int) {
		g, log := newTestGate(t, Config{Breaker: breakerConfig()})
		at := closeOnProbes(t, g, heldOK("h0"), heldOK("h1"))
		if poison {
			if v := deliver(t, g, at, true, heldLast("poison")); v != Hold {
				t.Fatalf("first failure after the close: %v, want Hold", v)
			}
			if n := strings.Count(log.String(), "breaker open:"); n != 2 {
				t.Errorf("%d lines say the breaker opened, want 2 (one per opening):\n%s", n, log)
			}
			at = playRound(t, g, acknowledged("p", 2)...)
			wantState(t, g, at, Closed)
			if v := deliver(t, g, at, true, heldLast("poison")); v != Count {
				t.Errorf("second failure: %v, want Count (dead-lettered)", v)
			}
			wantState(t, g, at, Closed)
		}
		for i := 0; g.Snapshot(at).State == Closed; i++ {
			if deliver(t, g, at, false, fail(fmt.Sprint("down", i))) == Count {
				routed++
			}
		}
		return routed
	}
	if with, without := downAgain(true), downAgain(false); with != without {
		t.Errorf("dependency down again: %d fresh failures routed before the breaker opened after the poison's reopening, %d without it; want the same", with, without)
	}
}

// TestPoisonInAQuietBacklogOpensOnce: only retries flow after the close
// (a quiet source), 25 acknowledged between each of 10 records on their
// last tier that fail for reasons of their own. Without a fresh success
// the breaker opens again once, not once per such record (the next
// breaker round: 10 times, when this was once per episode).
func TestPoisonInAQuietBacklogOpensOnce(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	at := closeOnProbes(t, g, heldOK("h0"), heldOK("h1"))
	reopened := 0
	for p := range 10 {
		for i := range 25 {
			deliver(t, g, at, true, success(fmt.Sprint("r", p, "-", i)))
		}
		o := fail(fmt.Sprint("poison", p))
		o.Last = true
		if deliver(t, g, at, true, o) == Hold {
			reopened++
			at = playRound(t, g, heldOK(fmt.Sprint("p", p, "a")), heldOK(fmt.Sprint("p", p, "b")))
			wantState(t, g, at, Closed)
		}
	}
	if reopened != 1 {
		t.Errorf("the breaker opened again %d times for 10 records on their last tier, want once", reopened)
	}
}

// TestLastTierWithTheGuardAloneCounts: with the breaker off (the guard
// alone), no failure opens it for the dependency, after a close neither.
func TestLastTierWithTheGuardAloneCounts(t *testing.T) {
	cfg := breakerConfig()
	cfg.Enabled = false
	g, _ := newTestGate(t, Config{Breaker: cfg, Guard: GuardConfig{Enabled: true, MaxDeadLetters: 5, Window: time.Minute, Share: 0.9}})
	for i := range 6 {
		deliver(t, g, t0, false, notFound(fmt.Sprint("k", i)))
	}
	wantState(t, g, t0, Open)
	at := playRound(t, g, success("fresh"), heldNotFound("k5"), heldNotFound("k4"))
	wantState(t, g, at, Closed)
	o := fail("retry")
	o.Last = true
	if v := deliver(t, g, at, true, o); v != Count {
		t.Errorf("last-tier failure with the breaker off: %v, want Count", v)
	}
	wantState(t, g, at, Closed)
}

// TestLastTierAfterTheGuardClosesCounts: the guard's outage closes on an
// acknowledged fresh probe and the dependency was never down; a retry
// failing on its last tier afterwards is dead-lettered, as before.
func TestLastTierAfterTheGuardClosesCounts(t *testing.T) {
	g, _ := poisonRig(t)
	at := playRound(t, g, success("fresh"), heldNotFound("k5"), heldNotFound("k4"))
	wantState(t, g, at, Closed)
	o := fail("retry")
	o.Last = true
	if v := deliver(t, g, at, true, o); v != Count {
		t.Errorf("last-tier failure after the guard closed: %v, want Count", v)
	}
	wantState(t, g, at, Closed)
}
