package overload

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestQuietSourceRetriesSpendAttempts: the source is quiet and a few
// records on their last tier fail transiently forever (a poison that
// answers 503). Their failures alone open the breaker (retries only); its
// probes hold them while weakRounds rounds are lost, then spend their
// attempts (Spend), so they reach the DLQ as exhausted instead of being
// held forever (the newcomer's demo: 8 such keys held for 13 minutes).
// A fresh record failing as a probe is an outage: then nothing is spent.
func TestQuietSourceRetriesSpendAttempts(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		t.Run(fmt.Sprintf("fresh probe %v", fresh), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, _ := newTestGate(t, Config{MaxInFlight: 4,
					Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3}})
				unavailable := func(i int) Outcome {
					k := fmt.Sprint("k", i%8)
					return Outcome{Class: Transient, Key: k, ID: fmt.Sprint("orders/0/", i), Answer: "503", Message: "status 503"}
				}
				for i := 0; g.Snapshot(time.Now()).State == Closed; i++ {
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
				for round := 0; len(verdicts) < weakRounds+3; {
					w, _ := g.Wake(time.Now())
					time.Sleep(time.Until(w))
					if !g.Probing(time.Now()) {
						continue
					}
					var vs []Verdict
					for g.Snapshot(time.Now()).State == Probing {
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
					}
					verdicts = append(verdicts, vs)
					round++
				}
				for r, vs := range verdicts {
					want := Probe
					if !fresh && r >= weakRounds {
						want = Spend
					}
					for _, v := range vs {
						if v != want {
							t.Errorf("probe round %d: verdicts %v, want all %v", r+1, vs, want)
							break
						}
					}
				}
			})
		})
	}
}
