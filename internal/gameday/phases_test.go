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
		p := Quick()
		a := &app{seen: map[int64]int{}, done: map[int64]bool{}}
		ld := &load{topic: "orders", keys: p.Keys, produced: map[int64]order{},
			send: func(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) { promise(r, nil) }}
		ph := &phases{ctx: ctx, e: &env{plan: &p, app: a}, load: ld, dlq: &dlqReader{}}
		start := time.Now()
		dlqAt, stall := start.Add(2*time.Second), start.Add(1950*time.Millisecond)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		wg.Go(func() { ld.setRate(p.SteadyRate); ld.run(ctx) })
		wg.Go(func() { fakeQueue(ctx, ph, dlqAt, stall, time.Second) })

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

// fakeQueue plays kretry and the app: every 5ms it acknowledges each
// steady record 15ms after it was produced, those produced in [stall,
// dlqAt) only after a further delay, and it dead-letters the poison record
// at dlqAt.
func fakeQueue(ctx context.Context, ph *phases, dlqAt, stall time.Time, delay time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Millisecond):
		}
		now := time.Now()
		for id, o := range ph.load.records() {
			prod := time.Unix(0, o.Produced)
			due := prod.Add(15 * time.Millisecond)
			if !prod.Before(stall) && prod.Before(dlqAt) {
				due = due.Add(delay)
			}
			switch {
			case o.Kind == kindPoison && !now.Before(dlqAt) && !ph.dlq.has(id):
				ph.dlq.mu.Lock()
				ph.dlq.letters = append(ph.dlq.letters, deadLetter{ID: id, Kind: kindPoison, At: now})
				ph.dlq.mu.Unlock()
			case o.Kind == kindSteady && !now.Before(due):
				ph.e.app.mu.Lock()
				ph.e.app.done[id] = true
				ph.e.app.mu.Unlock()
			}
		}
	}
}
