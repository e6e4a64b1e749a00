package overload

import (
	"fmt"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	g, _ := newTestGate(t, Config{Budget: BudgetConfig{Ratio: 0.2, Window: 10 * time.Second}})
	for i := range 8 {
		deliver(t, g, t0, false, success(fmt.Sprint("k", i)))
	}
	admitted := 0
	for range 5 {
		if tk, ok := g.Admit(t0, true, 0); ok {
			g.Done(t0, tk, success("r"))
			admitted++
		}
	}
	if admitted != 2 { // (r+1) ≤ 0.2·(d+1): 1 ≤ 1.8, 2 ≤ 2.0, 3 > 2.2
		t.Errorf("%d retries admitted after 8 first attempts, want 2", admitted)
	}
	if _, ok := g.Admit(t0, false, 0); !ok {
		t.Error("a first attempt refused by the retry budget")
	}
	if !g.Paused(t0, true) || g.Paused(t0, false) {
		t.Error("over budget: the tiers should pause, the source not")
	}
	if s := g.Snapshot(t0); s.BudgetDenied != 3 || s.RetryRatio < 0.18 || s.RetryRatio > 0.19 {
		t.Errorf("snapshot %+v, want 3 denied, ratio 2/11", s)
	}
	// The window moves on: the old deliveries no longer count. With no
	// first attempt in it and no floor, one retry per window gets
	// through (a quiet source's retries are not held for ever), no more.
	later := t0.Add(11 * time.Second)
	if tk, ok := g.Admit(later, true, 0); !ok {
		t.Error("no retry admitted with no first attempt in the window: a quiet source's retries would wait for ever")
	} else {
		g.Done(later, tk, success("r"))
	}
	if _, ok := g.Admit(later, true, 0); ok {
		t.Error("a second retry admitted in the same window with no floor")
	}
}

func TestBudgetFloor(t *testing.T) {
	g, _ := newTestGate(t, Config{Budget: BudgetConfig{Ratio: 0.1, MinPerSecond: 2, Window: 10 * time.Second}})
	n := 0
	for range 10 {
		if _, ok := g.Admit(t0, true, 0); ok {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d retries admitted by the floor at once, want 2 (min_per_second, burst 1s)", n)
	}
	if _, ok := g.Admit(t0.Add(500*time.Millisecond), true, 0); !ok {
		t.Error("the floor's next token (after 0.5s) refused")
	}
}

func TestMaxRate(t *testing.T) {
	g, _ := newTestGate(t, Config{MaxRate: 10})
	n := 0
	for range 20 {
		if _, ok := g.Admit(t0, false, 0); ok {
			n++
		}
	}
	if n != 10 {
		t.Errorf("%d admitted at once, want 10 (burst of one second at 10/s)", n)
	}
	if w, ok := g.Wake(t0); !ok || w.Sub(t0) != 100*time.Millisecond {
		t.Errorf("Wake %v %v, want +100ms", w.Sub(t0), ok)
	}
	if _, ok := g.Admit(t0.Add(100*time.Millisecond), false, 0); !ok {
		t.Error("refused after a token's time")
	}
}

func TestAdaptiveLimitStartsAtInitial(t *testing.T) {
	g, _ := newTestGate(t, Config{Adaptive: true, MaxInFlight: 64, InitialInFlight: 4})
	var tks []Ticket
	for range 10 {
		if tk, ok := g.Admit(t0, false, len(tks)); ok {
			tks = append(tks, tk)
		}
	}
	if len(tks) != 4 {
		t.Fatalf("%d admitted concurrently, want 4 (the initial limit)", len(tks))
	}
	g.Done(t0, tks[0], success("a"))
	if _, ok := g.Admit(t0, false, 3); !ok {
		t.Error("a permit freed by Done not reusable")
	}
	if s := g.Snapshot(t0); s.Limit < 1 || s.Limit > 64 {
		t.Errorf("limit %d outside [1, 64]", s.Limit)
	}
}

// BenchmarkGate is the gate's cost per delivery (Admit and Done) with
// every policy on: go test -bench Gate ./overload
func BenchmarkGate(b *testing.B) {
	g := New(Config{
		Breaker:     BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: time.Minute, Probes: 3},
		Guard:       GuardConfig{Enabled: true, MaxDeadLetters: 10, Window: time.Minute, Share: 0.9},
		Budget:      BudgetConfig{Ratio: 0.2, MinPerSecond: 10, Window: 10 * time.Second},
		MaxInFlight: 64, Adaptive: true, InitialInFlight: 16, MaxRate: 1e9,
	})
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i)
	}
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Microsecond)
		tk, ok := g.Admit(now, i%10 == 0, 0)
		if !ok {
			continue
		}
		o := Outcome{Class: OK, Key: keys[i%len(keys)]}
		if i%20 == 0 {
			o = Outcome{Class: Transient, Key: keys[i%len(keys)], Answer: "503", Message: "status 503: busy"}
		}
		g.Done(now, tk, o)
	}
}
