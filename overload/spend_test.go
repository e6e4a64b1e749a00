package overload

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestQuietSourceRetriesCloseTheBreaker: the source is quiet and a few
// records fail transiently forever (a poison that answers 503 on several
// keys). Their failures alone open the breaker (retries only); its probes
// hold them while weakRounds rounds are lost, then the breaker closes (the
// last failed probe's attempt counts: Spend) and the records walk their
// tiers to the DLQ as exhausted instead of being held forever (the
// newcomer's demo: keys held past its deadline). Retries alone do not
// open it again; fresh records failing do. A fresh record failing as a
// probe is an outage: then the breaker stays open and nothing is spent.
func TestQuietSourceRetriesCloseTheBreaker(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		t.Run(fmt.Sprintf("fresh probe %v", fresh), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, _ := newTestGate(t, Config{MaxInFlight: 4,
					Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3}})
				unavailable := func(i int) Outcome {
					k := fmt.Sprint("k", i%8)
					return Outcome{Class: Transient, Key: k, ID: fmt.Sprint("orders/0/", i), Answer: "503", Message: "status 503"}
				}
				state := func() State { return g.Snapshot(time.Now()).State }
				for i := 0; state() == Closed; i++ {
					if i == 200 {
						t.Fatal("retries failing alone on a quiet source did not open the breaker")
					}
					tk, ok := g.Admit(time.Now(), true, 0)
					if !ok {
						t.Fatalf("delivery %d not admitted while closed", i)
					}
					g.Done(time.Now(), tk, unavailable(i))
				}
				var verdicts [][]Verdict // per probe round
				for round := 0; round < weakRounds+2 && state() != Closed; {
					w, _ := g.Wake(time.Now())
					time.Sleep(time.Until(w))
					if !g.Probing(time.Now()) {
						continue
					}
					var vs []Verdict
					for len(vs) < 3 { // a round's probes
						// The first probe of the first round is a fresh
						// record when fresh: it fails too.
						retry := !(fresh && round == 0 && len(vs) == 0)
						tk, ok := g.Admit(time.Now(), retry, 0)
						if !ok {
							break
						}
						o := unavailable(len(vs))
						o.Again = retry
						vs = append(vs, g.Done(time.Now(), tk, o))
						if state() != Probing { // the round is decided
							break
						}
					}
					if len(vs) == 0 {
						t.Fatalf("probe round %d admitted no probe", round+1)
					}
					verdicts = append(verdicts, vs)
					round++
				}
				if fresh {
					if state() == Closed {
						t.Fatalf("a fresh record failed as a probe, yet the breaker closed after rounds %v", verdicts)
					}
					for r, vs := range verdicts {
						for _, v := range vs {
							if v != Probe {
								t.Errorf("probe round %d: verdicts %v, want all %v (an outage spends nothing)", r+1, vs, Probe)
							}
						}
					}
					return
				}
				if len(verdicts) != weakRounds || state() != Closed {
					t.Fatalf("after rounds %v the breaker is %v, want closed after %d lost rounds", verdicts, state(), weakRounds)
				}
				for r, vs := range verdicts {
					for i, v := range vs {
						want := Probe
						if r == weakRounds-1 && i == len(vs)-1 {
							want = Spend
						}
						if v != want {
							t.Errorf("probe round %d: verdicts %v, want %v at %d", r+1, vs, want, i)
						}
					}
				}
				// Retries alone do not open it again: they walk their tiers.
				for i := range 200 {
					tk, ok := g.Admit(time.Now(), true, 0)
					if !ok {
						t.Fatalf("retry %d not admitted after the quiet close", i)
					}
					if v := g.Done(time.Now(), tk, unavailable(i)); v != Count || state() != Closed {
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
