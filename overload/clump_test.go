package overload

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// call is one delivery a tick of the simulation starts: how long it takes
// and whether it fails (a timeout, transient).
type call struct {
	took time.Duration
	fail bool
}

// traffic is what ran through a gate in simulate.
type traffic struct {
	opened  bool
	at      time.Duration // since the start, when the breaker opened
	counted int           // transient failures that counted (routed) before it opened
	ok      int
}

// simulate drives g as the engine does, in a synctest bubble: every tick
// it starts the calls plan gives for that time (the ones past most in
// flight or refused by the gate are not started), each in its own
// goroutine that reports its outcome when it ends.
func simulate(t *testing.T, g *Gate, most int, tick, horizon time.Duration, plan func(at time.Duration) []call) traffic {
	t.Helper()
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		res      traffic
		inflight int
	)
	start := time.Now()
	for i := 0; time.Since(start) < horizon; time.Sleep(tick) {
		for _, c := range plan(time.Since(start)) {
			mu.Lock()
			tk, ok := Ticket{}, inflight < most
			if ok {
				tk, ok = g.Admit(time.Now(), false, inflight)
			}
			if ok {
				inflight++
			}
			mu.Unlock()
			if !ok {
				continue
			}
			i++
			o := success(fmt.Sprint("k", i))
			if c.fail {
				o = Outcome{Class: Transient, Key: o.Key, ID: o.ID, Answer: "timeout", Message: "context deadline exceeded"}
			}
			wg.Go(func() {
				time.Sleep(c.took)
				mu.Lock()
				defer mu.Unlock()
				inflight--
				v := g.Done(time.Now(), tk, o)
				switch {
				case o.Class == OK:
					res.ok++
				case res.opened:
				case v == Count:
					res.counted++
				case v == Hold:
					res.opened, res.at = true, time.Since(start)
				}
			})
		}
	}
	wg.Wait()
	return res
}

// healthy is a call that succeeds in 2ms.
var healthy = call{took: 2 * time.Millisecond}

// TestClumpOfTimeoutsAmongHealthyTraffic: 20 deliveries that start
// together and time out together after 1s (the app's timeout), while 200
// deliveries a second around them succeed, are not an outage: the breaker
// stays closed and the 20 are routed as usual. Counting by completion
// alone, the 20 filled the window of 20 at once and opened it (kretry demo
// with the default window: opened in 7 of 7 runs).
func TestClumpOfTimeoutsAmongHealthyTraffic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, log := newTestGate(t, Config{Breaker: breakerConfig(), MaxInFlight: 64})
		res := simulate(t, g, 64, 5*time.Millisecond, 3*time.Second, func(at time.Duration) []call {
			calls := []call{healthy}
			if at == time.Second {
				for range 20 {
					calls = append(calls, call{took: time.Second, fail: true})
				}
			}
			return calls
		})
		if res.opened {
			t.Fatalf("the breaker opened at %v after %d routed failures, want closed: 20 timeouts that started together among %d successes\n%s", res.at, res.counted, res.ok, log)
		}
		if res.counted != 20 || res.ok != 600 {
			t.Errorf("%d failures routed, %d successes; want 20 and 600", res.counted, res.ok)
		}
	})
}

// TestOutageOpensAsBefore: a dependency that stops answering after a
// second of healthy traffic (every call from then times out after 1s, or
// fails at once) opens the breaker after the same 10 routed failures
// (9 routed, the 10th held: half of the window of 20), at the same time,
// as when the window counted completions alone. So does a dependency that
// hangs 60% of its calls while the rest succeed in numbers: its successes
// end during a hanging call's flight, but so do, or still run, the calls
// that hang (counting only what ended, 45 failures were routed first).
func TestOutageOpensAsBefore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		most    int
		tick    time.Duration
		down    func(i int) call
		counted int
		at      time.Duration
	}{
		{"every call times out", 32, 5 * time.Millisecond, func(int) call { return call{took: time.Second, fail: true} }, 9, 2045 * time.Millisecond},
		{"every call fails at once", 32, 5 * time.Millisecond, func(int) call { return call{took: time.Millisecond, fail: true} }, 9, 1046 * time.Millisecond},
		{"60% of calls time out", 64, 2 * time.Millisecond, func(i int) call {
			if i%5 < 3 {
				return call{took: time.Second, fail: true}
			}
			return healthy
		}, 9, 2030 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g, _ := newTestGate(t, Config{Breaker: breakerConfig(), MaxInFlight: tc.most})
				i := 0
				res := simulate(t, g, tc.most, tc.tick, 4*time.Second, func(at time.Duration) []call {
					if at < time.Second {
						return []call{healthy}
					}
					i++
					return []call{tc.down(i)}
				})
				switch {
				case !res.opened:
					t.Fatalf("the breaker did not open; %d failures routed, %d successes", res.counted, res.ok)
				case res.counted != tc.counted || res.at != tc.at:
					t.Errorf("opened at %v after %d routed failures, want at %v after %d (as main)", res.at, res.counted, tc.at, tc.counted)
				}
				t.Logf("opened at %v after %d routed failures, %d successes", res.at, res.counted, res.ok)
			})
		})
	}
}
