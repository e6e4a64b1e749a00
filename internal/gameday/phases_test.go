package gameday

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPoisonPhaseWaitsForItsRecords: the poison phase ends only once every
// steady record produced while the poison record was retried has been
// acknowledged, so that the burst phase's blip of the dependency, which
// starts at its end, cannot fail one of them. Here the poison record is
// dead-lettered 2s in, and the records produced in the 50ms before are
// answered only 1s later.
func TestPoisonPhaseWaitsForItsRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		p, a, ld, ph := quickPhases(ctx)
		start := time.Now()
		dlqAt, stall := start.Add(2*time.Second), start.Add(1950*time.Millisecond)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() { ld.setRate(p.SteadyRate); ld.run(ctx) })
		wg.Go(func() {
			fakeQueue(ctx, ph, dlqAt, func(prod time.Time) time.Time {
				if !prod.Before(stall) && prod.Before(dlqAt) {
					return prod.Add(time.Second)
				}
				return prod.Add(15 * time.Millisecond)
			})
		})

		ph.phase(PhasePoison, ph.injectPoison, true)
		s := ph.spans[0]
		if !s.Settled || s.Inject.Before(dlqAt) {
			t.Errorf("settled %v, injection ended %v after the start, want settled, at or after the poison's dead-lettering (2s)", s.Settled, s.Inject.Sub(start))
		}
		unacked := 0
		for id, o := range ld.records() {
			if o.Kind == kindSteady && time.Unix(0, o.Produced).Before(dlqAt) && !a.acked(id) {
				unacked++
			}
		}
		if unacked > 0 {
			t.Errorf("the phase ended %v after the start with %d records produced while the poison record was retried not acknowledged", s.End.Sub(start), unacked)
		}
	})
}

// TestPhaseEndsOnACaughtUpQueue: a phase does not end while the queue is
// still draining a backlog (records waiting behind older ones, or parked
// behind their key's retry), so that the next phase does not start on it.
// Here the records produced before the injection's end (100ms) are
// answered at 550ms, and the queue then drains the records produced since
// at 4× the rate they arrive: it catches up 695ms in.
func TestPhaseEndsOnACaughtUpQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		p, _, ld, ph := quickPhases(ctx)
		start := time.Now()
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() { ld.setRate(p.SteadyRate); ld.run(ctx) })
		wg.Go(func() {
			fakeQueue(ctx, ph, time.Time{}, func(prod time.Time) time.Time {
				backlog := start.Add(550*time.Millisecond + max(prod.Sub(start)-100*time.Millisecond, 0)/4)
				return later(backlog, prod.Add(15*time.Millisecond))
			})
		})

		ph.phase(PhaseFailing, func() { ph.sleep(100 * time.Millisecond) }, true)
		if s := ph.spans[0]; !s.Settled || s.End.Sub(start) < 695*time.Millisecond {
			t.Errorf("the phase ended %v after its start (settled %v), while its backlog drained until 695ms", s.End.Sub(start), s.Settled)
		}
	})
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// fakeQueue plays kretry and the app: every 5ms it acknowledges each
// steady record from ackAt(its produce time) on, and it dead-letters the
// poison record at dlqAt.
func fakeQueue(ctx context.Context, ph *phases, dlqAt time.Time, ackAt func(time.Time) time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
		now := time.Now()
		for id, o := range ph.load.records() {
			switch {
			case o.Kind == kindPoison && !now.Before(dlqAt) && !ph.dlq.has(id):
				ph.dlq.mu.Lock()
				ph.dlq.letters = append(ph.dlq.letters, deadLetter{ID: id, Kind: kindPoison, At: now})
				ph.dlq.mu.Unlock()
			case o.Kind == kindSteady && !now.Before(ackAt(time.Unix(0, o.Produced))):
				ph.e.app.mu.Lock()
				ph.e.app.done[id] = true
				ph.e.app.mu.Unlock()
			}
		}
	}
}

// quickPhases are the phases of the quick plan over an app and a load
// whose every produce succeeds at once, with no broker.
func quickPhases(ctx context.Context) (Plan, *app, *load, *phases) {
	p := Quick()
	a := &app{seen: map[int64]int{}, done: map[int64]bool{}}
	ld := &load{topic: "orders", keys: p.Keys, produced: map[int64]order{},
		send: func(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) { promise(r, nil) }}
	ph := &phases{ctx: ctx, e: &env{plan: &p, app: a}, load: ld, dlq: &dlqReader{}}
	return p, a, ld, ph
}
