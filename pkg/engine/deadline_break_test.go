package engine

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// TestDeadlinesBreakBoundsForAnyTimeout: for any DeliveryTimeout (down to
// 1ns, where the slack is 0) and any sequence of starts, a delivery's
// deadline is in [start+timeout, start+timeout+slack], the slack is
// min(timeout/100, 10ms), and leaving in any order keeps each cohort's
// running list exact. Deterministic: join is handed its start time.
func TestDeadlinesBreakBoundsForAnyTimeout(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, timeout := range []time.Duration{1, 99, 100, 150, time.Microsecond, time.Millisecond, 999 * time.Millisecond, time.Second, time.Hour} {
		d := newDeadlines(ctx, timeout, nil)
		if want := min(timeout/100, maxDeadlineSlack); d.slack != want {
			t.Errorf("timeout %v: slack %v, want %v", timeout, d.slack, want)
		}
		now := time.Now().Add(time.Hour) // deadlines in the future, so contexts stay live
		var live []*result
		for range 3000 {
			switch rnd.IntN(4) {
			case 0: // same instant
			case 1:
				now = now.Add(time.Duration(rnd.Int64N(int64(d.slack) + 1)))
			case 2:
				now = now.Add(d.slack)
			default:
				now = now.Add(time.Duration(rnd.Int64N(int64(timeout) + 1)))
			}
			r := &result{}
			d.join(r, now)
			live = append(live, r)
			dl, ok := r.ctx.Deadline()
			if !ok || dl.Before(now.Add(timeout)) || dl.After(now.Add(timeout+d.slack)) {
				t.Fatalf("timeout %v slack %v: start %v, deadline %v after it, want in [%v, %v]",
					timeout, d.slack, now.Format(time.StampNano), dl.Sub(now), timeout, timeout+d.slack)
			}
			if rnd.IntN(2) == 0 && len(live) > 0 {
				i := rnd.IntN(len(live))
				d.leave(live[i])
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
			}
		}
		// every live result is on exactly its cohort's list, once
		seen := map[*result]int{}
		cohorts := map[*cohort]bool{}
		for _, r := range live {
			cohorts[r.cohort] = true
		}
		for c := range cohorts {
			for _, r := range c.stillRunning() {
				seen[r]++
				if r.cohort != c {
					t.Fatalf("timeout %v: a result on another cohort's list", timeout)
				}
			}
		}
		for _, r := range live {
			if seen[r] != 1 {
				t.Fatalf("timeout %v: a running result listed %d times", timeout, seen[r])
			}
		}
		if len(seen) != len(live) {
			t.Fatalf("timeout %v: %d listed, %d running (a finished one still listed)", timeout, len(seen), len(live))
		}
	}
}
