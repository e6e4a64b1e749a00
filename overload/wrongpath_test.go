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
// dependency answers), and fresh records answer 404 after. At most
// max_dead_letters records are dead-lettered with the 404 before the
// guard holds one, and the outage it opens is the guard's.
func TestGuardCountsThroughADependencyOutage(t *testing.T) {
	for _, tt := range []struct{ inflight int }{{0}, {5}, {12}} {
		t.Run(fmt.Sprintf("under way %d", tt.inflight), func(t *testing.T) {
			guard := GuardConfig{Enabled: true, MaxDeadLetters: 10, Window: time.Minute, Share: 0.9}
			g, _ := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard, MaxInFlight: 64})
			at := t0
			for i := range 30 {
				deliver(t, g, at, false, success(fmt.Sprint("ok", i)))
			}
			deadLettered := 0
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

// TestGuardDuringAnOutageCountsAcknowledgements (the next breaker round):
// 22 deliveries under way when the breaker opens for the dependency end
// while it is open, every other one answered 404 (a key each). 404 is
// half of what the app answered: the guard must not trip, as with the
// breaker closed.
func TestGuardDuringAnOutageCountsAcknowledgements(t *testing.T) {
	guard := GuardConfig{Enabled: true, MaxDeadLetters: 10, Window: time.Minute, Share: 0.9}
	g, _ := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard, MaxInFlight: 64})
	for i := range 30 {
		deliver(t, g, t0, false, success(fmt.Sprint("ok", i)))
	}
	var tks []Ticket
	for range 22 {
		tk, _ := g.Admit(t0, false, 0)
		tks = append(tks, tk)
	}
	openBreaker(t, g)
	for i, tk := range tks {
		o := success(fmt.Sprint("late", i))
		if i%2 == 1 {
			o = notFound(fmt.Sprint("late", i))
		}
		g.Done(t0, tk, o)
	}
	if s := g.Snapshot(t0); s.Opened[ReasonSystemic] != 0 || s.Reason != ReasonDependency {
		t.Errorf("%+v: the guard tripped on 404 answered to half of the deliveries", s)
	}
}
