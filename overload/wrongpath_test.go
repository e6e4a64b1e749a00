package overload

import (
	"fmt"
	"testing"
	"time"
)

// TestGuardCountsThroughADependencyOutage (a breaker helper's rig, 7
// December: 15 dead-lettered, against max_dead_letters 10): after healthy
// traffic the app goes down (503) and comes back on a wrong path (404 to
// everything). The deliveries under way when the breaker opened answer
// 404 while it is open, the probes answer 404 and close it (the
// dependency answers), and fresh records answer 404 after; in two cases
// the app answered 404 before it went down too. At most
// max_dead_letters records are dead-lettered with the 404 before the
// guard holds one, and the outage it opens is the guard's.
func TestGuardCountsThroughADependencyOutage(t *testing.T) {
	for _, tt := range []struct{ before, inflight int }{{0, 0}, {0, 5}, {0, 12}, {6, 0}, {6, 3}} {
		t.Run(fmt.Sprintf("before %d, under way %d", tt.before, tt.inflight), func(t *testing.T) {
			guard := GuardConfig{Enabled: true, MaxDeadLetters: 10, Window: time.Minute, Share: 0.9}
			g, _ := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard, MaxInFlight: 64})
			at := t0
			for i := range 30 {
				deliver(t, g, at, false, success(fmt.Sprint("ok", i)))
			}
			deadLettered := 0
			for i := range tt.before { // a first deploy on the wrong path, then down
				if deliver(t, g, at, false, notFound(fmt.Sprint("before", i))) == Count {
					deadLettered++
				}
			}
			var underWay []Ticket
			for range tt.inflight {
				tk, _ := g.Admit(at, false, 0)
				underWay = append(underWay, tk)
			}
			openBreaker(t, g)
			answer := func(tk Ticket, key string) Verdict {
				v := g.Done(at, tk, notFound(key))
				if v == Count {
					deadLettered++
				}
				return v
			}
			for i, tk := range underWay {
				answer(tk, fmt.Sprint("under-way", i))
			}
			for round := 0; g.Snapshot(at).State != Closed && g.Snapshot(at).Reason == ReasonDependency; round++ {
				if round == 5 {
					t.Fatal("the 404 probes did not close the dependency outage")
				}
				var tks []Ticket
				at = g.breaker.until
				for range 3 {
					if tk, ok := g.Admit(at, false, 0); ok {
						tks = append(tks, tk)
					}
				}
				for i, tk := range tks {
					answer(tk, fmt.Sprint("probe", round, i))
				}
			}
			for i := 0; g.Snapshot(at).State == Closed; i++ {
				if i == 100 {
					t.Fatal("100 records answered 404 after the close did not trip the guard")
				}
				tk, ok := g.Admit(at, false, 0)
				if !ok {
					t.Fatalf("record %d not admitted after the close", i)
				}
				if v := answer(tk, fmt.Sprint("fresh", i)); v != Count && v != Hold {
					t.Fatalf("record %d answered 404: verdict %v", i, v)
				}
			}
			if deadLettered > guard.MaxDeadLetters {
				t.Errorf("%d records dead-lettered with the same 404, want at most max_dead_letters %d", deadLettered, guard.MaxDeadLetters)
			}
			if s := g.Snapshot(at); s.State != Open || s.Reason != ReasonSystemic {
				t.Errorf("%+v, want open by the guard", s)
			}
		})
	}
}
