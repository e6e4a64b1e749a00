package overload

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestFreshFailureAfterAWeakOpeningIsAnOutage: the breaker opens on
// retries alone (due tier records are delivered first and fail fast),
// while fresh first attempts that started before the opening are still
// running against the hanging dependency. They time out after it opened:
// fresh records failed, an outage. Then the source is quiet and only held
// records are left to probe with. The breaker must stay open (spend
// nothing), as it does when a fresh record fails as a probe; counting
// only probes, it closed after weakRounds lost rounds and let the held
// fresh records walk their tiers during the outage.
func TestFreshFailureAfterAWeakOpeningIsAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{MaxInFlight: 16,
			Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3}})
		state := func() State { return g.Snapshot(time.Now()).State }
		deliver(t, g, time.Now(), false, success("before"))
		time.Sleep(2 * time.Second) // the outage begins; no first attempt succeeds for Wait
		var fresh []Ticket
		for range 8 {
			tk, ok := g.Admit(time.Now(), false, len(fresh))
			if !ok {
				t.Fatal("fresh record not admitted while closed")
			}
			fresh = append(fresh, tk)
		}
		for i := 0; state() == Closed; i++ {
			if i == 200 {
				t.Fatal("failing retries did not open the breaker")
			}
			deliver(t, g, time.Now(), true, fail(fmt.Sprint("retry", i%12)))
		}
		time.Sleep(100 * time.Millisecond) // the fresh records time out: held
		for i, tk := range fresh {
			o := fail(fmt.Sprint("fresh", i))
			o.Answer, o.Message = "timeout", "context deadline exceeded"
			if v := g.Done(time.Now(), tk, o); v != Hold {
				t.Fatalf("fresh record %d failing while open: %v, want %v", i, v, Hold)
			}
		}
		rounds := probeRounds(t, g, weakRounds+2, func(int, int) bool { return true }, func(i int) Outcome { return fail(fmt.Sprint("fresh", i)) })
		if state() == Closed {
			t.Fatalf("fresh records failed during the outage, yet the breaker closed after probe rounds %v of held records", rounds)
		}
	})
}

// TestLateFreshProbeFailureIsAnOutage: an outage opened on retries; in
// each round the fresh record probes first but answers last (it times
// out), after two held retries failed fast and lost the round. Its failure
// is of an earlier round, but still a fresh record failing: the breaker
// must stay open. Counting only the current round's probes, it closed
// after weakRounds rounds although a fresh record failed in every one.
func TestLateFreshProbeFailureIsAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{MaxInFlight: 16,
			Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3}})
		state := func() State { return g.Snapshot(time.Now()).State }
		for i := 0; state() == Closed; i++ {
			if i == 200 {
				t.Fatal("failing retries did not open the breaker")
			}
			deliver(t, g, time.Now(), true, fail(fmt.Sprint("retry", i%12)))
		}
		for round := range weakRounds + 2 {
			if state() == Closed {
				t.Fatalf("a fresh record failed in each of rounds 1..%d, yet the breaker closed", round)
			}
			for !g.Probing(time.Now()) {
				w, _ := g.Wake(time.Now())
				time.Sleep(time.Until(w))
			}
			fresh, ok := g.Admit(time.Now(), false, 0)
			if !ok {
				t.Fatalf("round %d: fresh probe not admitted", round+1)
			}
			for i := 0; state() == Probing; i++ {
				tk, ok := g.Admit(time.Now(), true, 1)
				if !ok {
					t.Fatalf("round %d: held retry probe %d not admitted", round+1, i)
				}
				o := fail(fmt.Sprint("retry", i))
				o.Again = true
				g.Done(time.Now(), tk, o)
			}
			time.Sleep(time.Second) // the fresh probe times out
			o := fail(fmt.Sprint("fresh", round))
			o.Answer = "timeout"
			g.Done(time.Now(), fresh, o)
		}
		if state() == Closed {
			t.Fatal("a fresh record failed in every round, yet the breaker closed")
		}
	})
}

// TestOutageDuringAParkingRelease: the source is quiet; parked records of
// many keys are being released (each succeeds in 1ms, 8 in flight) when
// the dependency goes down (every call fails at once, 503). The breaker
// must open after about a window of failures, as on first attempts, not
// after Wait: released records are records the app has not seen, and a
// second of them at this rate is thousands moved to a retry tier, each
// an attempt consumed by the outage.
func TestOutageDuringAParkingRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{Breaker: breakerConfig(), MaxInFlight: 8})
		start, counted, i := time.Now(), 0, 0
		for g.Snapshot(time.Now()).State == Closed && time.Since(start) < 5*time.Second {
			for j := 0; j < 8 && g.Snapshot(time.Now()).State == Closed; j++ {
				tk, ok := g.Admit(time.Now(), false, 0)
				if !ok {
					t.Fatalf("released record %d not admitted while closed", i)
				}
				i++
				o := Outcome{Class: OK, Key: fmt.Sprint("k", i%500), ID: fmt.Sprint("orders.parking/0/", i), Released: true}
				if time.Since(start) >= time.Second {
					o.Class, o.Answer, o.Message = Transient, "503", "status 503: unavailable"
				}
				if v := g.Done(time.Now(), tk, o); o.Class == Transient && v == Count {
					counted++
				}
			}
			time.Sleep(time.Millisecond)
		}
		if g.Snapshot(time.Now()).State == Closed {
			t.Fatalf("the breaker did not open in 4s of an outage; %d released records routed", counted)
		}
		t.Logf("opened %v into the outage after %d released records routed", time.Since(start)-time.Second, counted)
		if counted > 2*breakerConfig().Window {
			t.Errorf("%d released records were routed (an attempt consumed) before the breaker opened, %v into the outage; want at most %d", counted, time.Since(start)-time.Second, 2*breakerConfig().Window)
		}
	})
}

// TestRunningCountsOnlyDeliveriesUnderWay: the deliveries still running
// count as failing when a failure's flight is judged (see Clumping), so
// the count must follow Admit and Done exactly: an admission a later
// policy refused (rate, budget) never counts, a cancelled delivery ends,
// and a zero Ticket (no Admit) ends nothing. Drifting up, it would make
// every clump count; drifting down, it would let an outage's hanging
// calls be overtaken.
func TestRunningCountsOnlyDeliveriesUnderWay(t *testing.T) {
	g, _ := newTestGate(t, Config{Breaker: breakerConfig(), MaxRate: 2,
		Budget: BudgetConfig{Ratio: 0.1, Window: 10 * time.Second}})
	now := t0
	running, ok := g.Admit(now, false, 0) // a first attempt, left running
	if !ok {
		t.Fatal("first delivery not admitted")
	}
	if _, ok := g.Admit(now, true, 1); ok {
		t.Fatal("a retry over the budget was admitted")
	}
	cancelled, ok := g.Admit(now, false, 1)
	if !ok {
		t.Fatal("second first attempt not admitted")
	}
	if _, ok := g.Admit(now, false, 2); ok {
		t.Fatal("a delivery over max_rate was admitted")
	}
	g.Done(now, cancelled, Outcome{Class: Cancelled, Key: "c"})
	g.Done(now, Ticket{}, success("no-ticket"))
	if g.running != 1 {
		t.Fatalf("running = %d with one admitted delivery under way, want 1", g.running)
	}
	g.Done(now, running, success("r"))
	if g.running != 0 {
		t.Fatalf("running = %d after every admitted delivery ended, want 0", g.running)
	}
}
