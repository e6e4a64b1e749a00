package overload

import (
	"testing"
	"testing/synctest"
	"time"

	"fmt"
)

// TestQuietSourceClosesTheBreaker: a few records fail transiently forever
// (a poison that answers 503 on several keys) and the source is quiet.
// Their failures alone open the breaker (retries only); its probes hold
// them while weakRounds rounds are lost, then the breaker
// closes (the last failed probe's attempt counts: Spend) and the records
// walk their tiers to the DLQ as exhausted instead of being held forever
// (the newcomer's demo: keys held past its deadline). Retries alone do not
// open it again; fresh records failing do. An opening on fresh records, or
// a fresh record failing as a probe, is an outage: the breaker stays open
// and spends nothing.
func TestQuietSourceClosesTheBreaker(t *testing.T) {
	for _, tt := range []struct {
		name          string
		openByRetries bool
		fresh         func(round int) bool // a fresh record probes first in this round
		closeAfter    int                  // rounds; 0 never
	}{
		{"opened by retries, only held records probed", true, func(int) bool { return false }, weakRounds},
		// Opened by fresh records failing: an outage, however the records
		// probed after it fail (all of them may have failed once while it
		// opened: e2e TestOutageDeadLettersNothing).
		{"opened by fresh records, then only held records probed", false, func(int) bool { return false }, 0},
		{"a fresh record fails in the first round", true, func(r int) bool { return r == 0 }, 0},
		{"a fresh record fails in every round", true, func(int) bool { return true }, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, _ := newTestGate(t, Config{MaxInFlight: 4,
					Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3}})
				unavailable := func(i int) Outcome {
					return Outcome{Class: Transient, Key: fmt.Sprint("k", i%8), ID: fmt.Sprint("orders/0/", i), Answer: "503", Message: "status 503"}
				}
				state := func() State { return g.Snapshot(time.Now()).State }
				for i := 0; state() == Closed; i++ {
					if i == 200 {
						t.Fatal("failures did not open the breaker")
					}
					tk, ok := g.Admit(time.Now(), tt.openByRetries, 0)
					if !ok {
						t.Fatalf("delivery %d not admitted while closed", i)
					}
					g.Done(time.Now(), tk, unavailable(i))
				}
				rounds := probeRounds(t, g, weakRounds+3, func(round, i int) bool { return !(tt.fresh(round) && i == 0) }, unavailable)
				if tt.closeAfter == 0 {
					if state() == Closed {
						t.Fatalf("a fresh record failed in every round, yet the breaker closed after rounds %v", rounds)
					}
					for r, vs := range rounds {
						for _, v := range vs {
							if v != Probe {
								t.Errorf("probe round %d: verdicts %v, want all %v (an outage spends nothing)", r+1, vs, Probe)
							}
						}
					}
					return
				}
				if len(rounds) != tt.closeAfter || state() != Closed {
					t.Fatalf("after rounds %v the breaker is %v, want closed after %d lost rounds", rounds, state(), tt.closeAfter)
				}
				for r, vs := range rounds {
					for i, v := range vs {
						want := Probe
						if r == tt.closeAfter-1 && i == len(vs)-1 {
							want = Spend
						}
						if v != want {
							t.Errorf("probe round %d: verdicts %v, want %v at %d", r+1, vs, want, i)
						}
					}
				}
				// Retries alone do not open it again: they walk their tiers,
				// the records it held too, on their last tier (see
				// again.go: only a probed close holds them again).
				for i := range 200 {
					tk, ok := g.Admit(time.Now(), true, 0)
					if !ok {
						t.Fatalf("retry %d not admitted after the quiet close", i)
					}
					o := unavailable(i)
					o.Again, o.Last = true, true
					if v := g.Done(time.Now(), tk, o); v != Count || state() != Closed {
						t.Fatalf("retry %d after the quiet close: verdict %v, breaker %v; want Count, closed", i, v, state())
					}
				}
				// Fresh records failing across keys still open it.
				for i := 0; state() == Closed; i++ {
					if i == 200 {
						t.Fatal("fresh records failing after the quiet close did not open the breaker")
					}
					tk, ok := g.Admit(time.Now(), false, 0)
					if !ok {
						t.Fatalf("first attempt %d not admitted while closed", i)
					}
					g.Done(time.Now(), tk, unavailable(i))
				}
			})
		})
	}
}

// probeRounds runs up to n probe rounds of failing probes, until the
// breaker closes, and returns each round's verdicts; retry says whether
// probe i of a round is a held retry (else a fresh record).
func probeRounds(t *testing.T, g *Gate, n int, retry func(round, i int) bool, fail func(int) Outcome) [][]Verdict {
	t.Helper()
	var rounds [][]Verdict
	for len(rounds) < n && g.Snapshot(time.Now()).State != Closed {
		w, _ := g.Wake(time.Now())
		time.Sleep(time.Until(w))
		if !g.Probing(time.Now()) {
			continue
		}
		var vs []Verdict
		for len(vs) < 3 { // a round's probes
			r := retry(len(rounds), len(vs))
			tk, ok := g.Admit(time.Now(), r, 0)
			if !ok {
				break
			}
			o := fail(len(vs))
			o.Again = r
			vs = append(vs, g.Done(time.Now(), tk, o))
			if g.Snapshot(time.Now()).State != Probing { // the round is decided
				break
			}
		}
		if len(vs) == 0 {
			t.Fatalf("probe round %d admitted no probe", len(rounds)+1)
		}
		rounds = append(rounds, vs)
	}
	return rounds
}

// TestQuietSourceKeepsTheGuardOpen: the guard's outage (the same
// permanent answer for many records) is never closed for want of fresh
// records: its held records are its evidence, and closing would
// dead-letter them all at once.
func TestQuietSourceKeepsTheGuardOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{MaxInFlight: 4,
			Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3},
			Guard:   GuardConfig{Enabled: true, MaxDeadLetters: 5, Window: time.Minute, Share: 0.5}})
		notFound := func(i int) Outcome {
			return Outcome{Class: Permanent, Key: fmt.Sprint("k", i), ID: fmt.Sprint("orders/0/", i), Answer: "404", Message: "status 404"}
		}
		for i := 0; g.Snapshot(time.Now()).State == Closed; i++ {
			if i == 50 {
				t.Fatal("404 for every record did not trip the guard")
			}
			tk, _ := g.Admit(time.Now(), false, 0)
			g.Done(time.Now(), tk, notFound(i))
		}
		rounds := probeRounds(t, g, weakRounds+3, func(int, int) bool { return true }, notFound)
		if s := g.Snapshot(time.Now()); s.State == Closed {
			t.Fatalf("the guard's outage closed after rounds %v with only held records probed", rounds)
		}
		for r, vs := range rounds {
			for _, v := range vs {
				if v == Spend || v == Count {
					t.Errorf("probe round %d: verdicts %v: a held record's attempt counted", r+1, vs)
				}
			}
		}
	})
}

// TestReleasedRecordsAreWeakEvidence: the source is drained and only the
// parked records of twelve keys are left, released one by one, each
// failing its first attempt (keys whose records all need a retry: the
// fault suite's mix once its other keys are done). Their keys failed
// before, so their failures are weak evidence, as retries are: the
// breaker may open on them, but after weakRounds lost probe rounds of
// such records it closes and they walk their tiers, instead of being
// held for ever (before Outcome.Released they opened it as an outage,
// and KRETRY_TEST_FAULT=overload never drained).
func TestReleasedRecordsAreWeakEvidence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{MaxInFlight: 4,
			Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3}})
		released := func(i int) Outcome {
			return Outcome{Class: Transient, Key: fmt.Sprint("k", i%12), ID: fmt.Sprint("orders/0/", i), Answer: "503", Message: "status 503", Released: true}
		}
		state := func() State { return g.Snapshot(time.Now()).State }
		for i := 0; state() == Closed && i < 200; i++ {
			tk, ok := g.Admit(time.Now(), false, 0) // a first attempt to the budget
			if !ok {
				t.Fatalf("released record %d not admitted while closed", i)
			}
			g.Done(time.Now(), tk, released(i))
		}
		if state() == Closed {
			return // never opened: nothing held
		}
		rounds := probeRounds(t, g, weakRounds+3, func(int, int) bool { return false }, func(i int) Outcome {
			o := released(i)
			o.Again = true // held when the breaker opened
			return o
		})
		if state() != Closed || len(rounds) != weakRounds {
			t.Fatalf("after probe rounds %v of released records the breaker is %v, want closed after %d lost rounds", rounds, state(), weakRounds)
		}
		if last := rounds[len(rounds)-1]; last[len(last)-1] != Spend {
			t.Errorf("the last lost round's verdicts %v: want the last %v (its attempt counts)", last, Spend)
		}
		// After the quiet close the released records of those keys walk
		// their tiers: they alone do not open the breaker again.
		for i := range 200 {
			tk, ok := g.Admit(time.Now(), false, 0)
			if !ok {
				t.Fatalf("released record %d not admitted after the quiet close", i)
			}
			if v := g.Done(time.Now(), tk, released(i)); v != Count || state() != Closed {
				t.Fatalf("released record %d after the quiet close: verdict %v, breaker %v; want Count, closed", i, v, state())
			}
			time.Sleep(10 * time.Millisecond) // longer than Wait in all
		}
	})
}

// TestReleasedSuccessesAreFirstAttempts: the source is drained; parked
// records are released and succeed while retries of other keys fail (the
// tail of kretry demo). A released record's success is the dependency
// serving a record it had not seen, as a first attempt's is: the retries'
// failures alone must not open the breaker (before, they did, four times a
// demo run, each a second of delivery paused).
func TestReleasedSuccessesAreFirstAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{MaxInFlight: 4,
			Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3}})
		for i := range 400 {
			retry := i%3 != 0 // two retries failing for each release succeeding
			tk, ok := g.Admit(time.Now(), retry, 0)
			if !ok {
				t.Fatalf("delivery %d not admitted", i)
			}
			o := Outcome{Class: OK, Key: fmt.Sprint("released-", i), ID: fmt.Sprint("orders/0/", i), Released: true}
			if retry {
				o = Outcome{Class: Transient, Key: fmt.Sprint("k", i%40), ID: fmt.Sprint("orders.retry.1s/0/", i), Answer: "503", Message: "status 503"}
			}
			if v := g.Done(time.Now(), tk, o); v != Count {
				t.Fatalf("delivery %d (retry %v): verdict %v, breaker %v; want Count, closed: released records succeed", i, retry, v, g.Snapshot(time.Now()).State)
			}
			time.Sleep(10 * time.Millisecond) // 4 s in all: longer than Wait
		}
	})
}
