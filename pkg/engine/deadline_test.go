package engine

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestDeadlinesShareWithinTheSlack: deliveries starting within one slack
// share a context whose deadline is never earlier than any one's own
// DeliveryTimeout and at most the slack later; a later start gets a new one.
func TestDeadlinesShareWithinTheSlack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDeadlines(t.Context(), time.Second, nil)
		if d.slack != maxDeadlineSlack {
			t.Fatalf("slack %v with DeliveryTimeout 1s, want %v", d.slack, maxDeadlineSlack)
		}
		var rs []*result
		starts := []time.Duration{0, 3 * time.Millisecond, 9 * time.Millisecond, 10 * time.Millisecond, 25 * time.Millisecond}
		t0 := time.Now()
		for _, s := range starts {
			time.Sleep(t0.Add(s).Sub(time.Now()))
			r := &result{}
			d.join(r, time.Now())
			rs = append(rs, r)
			dl, ok := r.ctx.Deadline()
			if !ok {
				t.Fatalf("start +%v: no deadline", s)
			}
			if own := t0.Add(s).Add(time.Second); dl.Before(own) || dl.After(own.Add(d.slack)) {
				t.Errorf("start +%v: deadline %v after t0, want in [%v, %v]", s, dl.Sub(t0), own.Sub(t0), own.Add(d.slack).Sub(t0))
			}
		}
		if rs[0].ctx != rs[1].ctx || rs[1].ctx != rs[2].ctx {
			t.Error("starts at +0, +3ms and +9ms do not share a context (slack 10ms)")
		}
		if rs[2].ctx == rs[3].ctx || rs[3].ctx == rs[4].ctx {
			t.Error("starts at +10ms and +25ms share a context with an earlier one")
		}
	})
}

// TestDeadlinesWatchdogSeesOnlyWhatStillRuns: abandonAfter past a shared
// context's end, the watchdog is handed exactly the deliveries that have not
// left; a cohort whose deliveries all left hands it nothing.
func TestDeadlinesWatchdogSeesOnlyWhatStillRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex // what e.mu is in the engine
		var got [][]*result
		d := newDeadlines(t.Context(), time.Second, func(c *cohort) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, c.stillRunning())
		})
		a, b, c := &result{}, &result{}, &result{}
		mu.Lock()
		for _, r := range []*result{a, b, c} {
			d.join(r, time.Now())
		}
		d.leave(b) // the middle of the list
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		done := &result{}
		mu.Lock()
		d.join(done, time.Now()) // a second cohort
		d.leave(done)
		mu.Unlock()

		time.Sleep(time.Second + maxDeadlineSlack + abandonAfter + 50*time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 2 {
			t.Fatalf("watchdog called %d times, want once per cohort (2)", len(got))
		}
		if !slices.Contains(got[0], a) || !slices.Contains(got[0], c) || len(got[0]) != 2 {
			t.Errorf("first cohort: watchdog got %d deliveries, want a and c (b left)", len(got[0]))
		}
		if len(got[1]) != 0 {
			t.Errorf("second cohort: watchdog got %d deliveries, want none (all left)", len(got[1]))
		}
		if a.ctx.Err() != context.DeadlineExceeded {
			t.Errorf("a's context: %v, want DeadlineExceeded", a.ctx.Err())
		}
	})
}

// TestDeadlinesEndWithTheParent: the parent's cancellation (the engine's
// hard stop) ends every shared context at once and calls the watchdog
// abandonAfter later.
func TestDeadlinesEndWithTheParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		var called atomic.Int32
		d := newDeadlines(parent, time.Hour, func(*cohort) { called.Add(1) })
		r := &result{}
		d.join(r, time.Now())
		cancel()
		synctest.Wait()
		if r.ctx.Err() != context.Canceled {
			t.Errorf("after the parent's cancel: %v, want Canceled", r.ctx.Err())
		}
		time.Sleep(abandonAfter + time.Millisecond)
		synctest.Wait()
		if n := called.Load(); n != 1 {
			t.Errorf("watchdog called %d times abandonAfter after the cancel, want 1", n)
		}
	})
}

// TestDeadlinesReleaseFinishedCohorts: a cohort that no delivery can join
// any more and none runs ends at once, without its watchdog, rather than
// living until its deadline (with DeliveryTimeout 1h, one cohort per 10ms
// of traffic would otherwise stay for an hour: hundreds of MB).
func TestDeadlinesReleaseFinishedCohorts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var called atomic.Int32
		d := newDeadlines(t.Context(), time.Hour, func(*cohort) { called.Add(1) })
		first, second, third := &result{}, &result{}, &result{}
		d.join(first, time.Now())
		d.leave(first) // still current: stays, a delivery may join it
		if first.ctx.Err() != nil {
			t.Fatalf("the current cohort ended when its only delivery left: %v", first.ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
		d.join(second, time.Now()) // a newer cohort: the first, empty, ends
		synctest.Wait()
		if first.ctx.Err() != context.Canceled {
			t.Errorf("the empty first cohort, no longer current: %v, want Canceled", first.ctx.Err())
		}
		time.Sleep(20 * time.Millisecond)
		d.join(third, time.Now()) // the second still runs: it stays
		synctest.Wait()
		if second.ctx.Err() != nil {
			t.Errorf("the second cohort ended with a delivery running: %v", second.ctx.Err())
		}
		d.leave(second) // its last delivery leaves: it ends
		synctest.Wait()
		if second.ctx.Err() != context.Canceled {
			t.Errorf("the second cohort after its last delivery left: %v, want Canceled", second.ctx.Err())
		}
		time.Sleep(abandonAfter + time.Millisecond)
		synctest.Wait()
		if n := called.Load(); n != 0 {
			t.Errorf("watchdog called %d times for released cohorts, want 0", n)
		}
	})
}
