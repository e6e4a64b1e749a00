package overload

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestProbeWaitGrowsOnHeldRecords: every record answers 422 with the
// guard on and the source is quiet, so every probe is a record held
// before (weak evidence) that fails again. The wait between probe rounds
// still doubles, jittered by 0..20%, up to MaxWait: not a probe every
// second forever. Driven as the engine does, in a synctest bubble, with
// the gate's own jitter.
func TestProbeWaitGrowsOnHeldRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{MaxInFlight: 4,
			Breaker: BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: 30 * time.Second, Probes: 3},
			Guard:   GuardConfig{Enabled: true, MaxDeadLetters: 5, Window: time.Minute, Share: 0.9}})
		g.breaker.rand = rand01(1)
		unprocessable := func(key string, again bool) Outcome {
			return Outcome{Class: Permanent, Key: key, ID: "orders/0/" + key, Answer: "422", Message: "status 422: rejected", Again: again}
		}
		// 20 records of 20 keys; the guard opens after 5 dead-letters.
		held := map[string]bool{}
		for i := range 20 {
			key := fmt.Sprint("k", i)
			tk, ok := g.Admit(time.Now(), false, 0)
			if !ok {
				break
			}
			if g.Done(time.Now(), tk, unprocessable(key, false)) == Hold {
				held[key] = true
			}
		}
		if s := g.Snapshot(time.Now()); s.State != Open || s.Reason != ReasonSystemic || len(held) != 1 {
			t.Fatalf("after 20 records answered 422: %+v with %d held, want open (systemic) holding 1", s, len(held))
		}
		start := time.Now()
		var rounds []time.Time // when each probe round began
		for time.Since(start) < 10*time.Minute {
			w, ok := g.Wake(time.Now())
			if !ok {
				t.Fatal("open with nothing to wait for")
			}
			time.Sleep(time.Until(w))
			if !g.Probing(time.Now()) {
				continue // the partitions' early resume
			}
			rounds = append(rounds, time.Now())
			for g.Snapshot(time.Now()).State == Probing || g.Probing(time.Now()) {
				tk, ok := g.Admit(time.Now(), false, 0)
				if !ok {
					break
				}
				if v := g.Done(time.Now(), tk, unprocessable("k0", true)); v != Probe {
					t.Fatalf("a held record's probe answered 422: %v, want Probe (held: it would dead-letter)", v)
				}
			}
		}
		// The waits: 2s, 4s, 8s, 16s, then 30s (capped), each +0..20%.
		for i := 1; i < len(rounds); i++ {
			base := min(30*time.Second, time.Second<<i)
			if got := rounds[i].Sub(rounds[i-1]); got < base || got > base+base/5 {
				t.Errorf("wait before probe round %d: %v, want %v..%v", i+1, got, base, base+base/5)
			}
		}
		// Without the growth: 600 rounds in 10 minutes; with it, 4 to
		// reach the cap and then one per 30..36s.
		if n := len(rounds); n < 18 || n > 25 {
			t.Errorf("%d probe rounds in 10 minutes, want 18..25 (waits doubling to 30s)", n)
		}
		t.Logf("%d probe rounds in 10 minutes of held records answering 422; first waits %v", len(rounds), waits(rounds, 6))
	})
}

// rand01 returns a deterministic sequence in [0, 1).
func rand01(seed uint64) func() float64 {
	x := seed
	return func() float64 {
		x = x*6364136223846793005 + 1442695040888963407
		return float64(x>>11) / (1 << 53)
	}
}

func waits(at []time.Time, n int) []time.Duration {
	var d []time.Duration
	for i := 1; i < len(at) && i <= n; i++ {
		d = append(d, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return d
}
