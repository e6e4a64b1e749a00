package overload

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// runAdaptive drives a gate with max_in_flight auto against an app whose
// latency is latency(in flight), for d of fake time, keeping as many
// deliveries in flight as the gate admits; it returns the final limit.
func runAdaptive(t *testing.T, d time.Duration, latency func(inflight int) time.Duration) int {
	var limit int
	synctest.Test(t, func(t *testing.T) {
		g, _ := newTestGate(t, Config{Adaptive: true, MaxInFlight: 256, InitialInFlight: 16})
		var mu sync.Mutex
		inflight := 0
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			mu.Lock()
			tk, ok := g.Admit(time.Now(), false, inflight)
			if ok {
				inflight++
			}
			n := inflight
			mu.Unlock()
			if !ok {
				time.Sleep(time.Millisecond)
				continue
			}
			wg.Go(func() {
				time.Sleep(latency(n))
				mu.Lock()
				inflight--
				mu.Unlock()
				g.Done(time.Now(), tk, success("k"))
			})
		}
		wg.Wait()
		limit = g.Snapshot(time.Now()).Limit
	})
	return limit
}

// TestAdaptiveLimit: against an app whose latency holds, the limit grows
// past its start; against one whose latency rises with concurrency (a
// saturated dependency: 16 requests at a time, the rest queue), it
// shrinks below it.
func TestAdaptiveLimit(t *testing.T) {
	flat := runAdaptive(t, 60*time.Second, func(int) time.Duration { return 10 * time.Millisecond })
	saturated := runAdaptive(t, 60*time.Second, func(n int) time.Duration {
		return 10 * time.Millisecond * time.Duration(max(1, (n+7)/8))
	})
	t.Logf("limit after 60s: flat latency %d, latency rising with concurrency %d (start 16)", flat, saturated)
	if flat <= 16 {
		t.Errorf("flat latency: limit %d, want above the initial 16", flat)
	}
	if saturated >= flat {
		t.Errorf("rising latency: limit %d, want below the flat case's %d", saturated, flat)
	}
}
