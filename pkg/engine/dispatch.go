package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// This file decides which deliveries may start now (startReady) and runs
// them (start, deliverSafely). startReady is the one place where a
// delivery starts: a policy that may refuse or delay a start (the overload
// gate: breaker, retry budget, rate limit) plugs in there, and pauses
// partitions through updatePauses (pauses.go).

// dispatch is the loop's turn over every shard: due tier records go to
// their lanes, a slow key's waiting records spill to parking, pauses are
// decided; then the ready deliveries start (startReady).
func (e *Engine) dispatch(now time.Time) {
	if e.stopping {
		return
	}
	for _, sh := range e.shards {
		if sh.restoring {
			continue
		}
		if e.opts.Ordering == flow.OrderingKey {
			e.maybeSpill(sh, now)
		}
		for _, q := range sh.tiers {
			for _, en := range q.due.TakeDue(now) {
				e.push(e.laneFor(sh, en.rec.Key), en)
			}
		}
		e.updatePauses(sh, now)
	}
	e.startReady()
}

// startReady starts deliveries of ready lanes while in-flight slots are
// free. A finished delivery calls it (not dispatch: its cost must not grow
// with the partitions), so a freed slot is used at once.
func (e *Engine) startReady() {
	if e.stopping {
		return
	}
	// Retries go first, up to their share, so a backlog of first attempts
	// cannot make them late; first attempts take every slot left, and at
	// least the share retries may not use.
	retryCap := max(1, int(e.opts.RetryShare*float64(e.opts.MaxInFlight)))
	now := time.Now()
	for len(e.retryReady) > 0 && e.inflight < e.opts.MaxInFlight && e.retrying < retryCap {
		l, t, ok := e.take(&e.retryReady, now) // overload gate
		if !ok {
			break
		}
		e.start(l, t)
	}
	for len(e.ready) > 0 && e.inflight < e.opts.MaxInFlight {
		l, t, ok := e.take(&e.ready, now) // overload gate
		if !ok {
			break
		}
		e.start(l, t)
	}
}

// nextDue returns the earliest due time of a tier record not yet handed to
// its lane.
func (e *Engine) nextDue() (time.Time, bool) {
	var next time.Time
	for _, sh := range e.shards {
		if sh.restoring {
			continue
		}
		for _, q := range sh.tiers {
			if d, ok := q.due.NextDue(); ok && (next.IsZero() || d.Before(next)) {
				next = d
			}
		}
	}
	return next, !next.IsZero()
}

// result is one finished delivery.
type result struct {
	gen   uint64
	lane  *lane
	en    *entry
	retry bool
	err   error
	took  time.Duration
	msg   *delivery.Message
	// ticket is the delivery's admission by Options.Overload.
	ticket overload.Ticket // overload gate
}

// start delivers the next entry of lane l, admitted by ticket (overload
// gate; zero without one).
func (e *Engine) start(l *lane, ticket overload.Ticket) {
	l.queued = false
	if l.running != nil || len(l.wait) == 0 {
		return
	}
	en := popFront(&l.wait)
	l.running = en
	retry := en.q.stage != 0
	e.inflight++
	if retry {
		e.retrying++
	}
	o := en.origin
	m := &delivery.Message{
		ID:        o.ID(),
		Topic:     o.Topic,
		Partition: o.Partition,
		Offset:    o.Offset,
		Timestamp: o.Timestamp,
		Key:       en.rec.Key,
		Value:     en.rec.Value,
		Headers:   o.Headers,
		Attempt:   attemptOf(o.Attempts),
		GapAfter:  en.gapAfter,
	}
	setRedrive(m, o) // redrive
	en.started = time.Since(monoStart)
	r := &result{gen: e.gen, lane: l, en: en, retry: retry, msg: m, ticket: ticket}
	e.deliveries.Add(1)
	e.stats.InFlight.Add(1)
	go func() {
		defer e.deliveries.Done()
		ctx, cancel := context.WithTimeout(e.hard, e.opts.DeliveryTimeout)
		start := time.Now()
		r.err = e.deliverSafely(ctx, m)
		r.took = time.Since(start)
		cancel()
		e.stats.InFlight.Add(-1)
		// Apply the result and start the next deliveries right here: going
		// through the poll loop would leave the slot idle for a loop turn.
		e.mu.Lock()
		e.apply(r)
		if !e.needAbort.Load() {
			e.startReady()
		}
		early := e.commitSoon
		e.mu.Unlock()
		if early {
			e.wake() // a commit is due
		}
	}()
}

// ErrHandlerPanic wraps the value of a delivery that panicked; it is
// classified as transient.
var ErrHandlerPanic = errors.New("handler panicked")

// deliverSafely delivers m, turning a panic of the handler into an error
// (transient) instead of a crash of the process, and a handler that does
// not return once ctx is done into a timeout: its slot is freed and its
// late answer is ignored.
func (e *Engine) deliverSafely(ctx context.Context, m *delivery.Message) error {
	if delivery.BoundByContext(e.opts.Deliverer) {
		// net/http ends a request when its context ends (delivery.HTTP, and
		// wrappers of it such as delivery.Health): no watchdog goroutine
		// needed (it would cost one more goroutine per record).
		return e.opts.Deliverer.Deliver(ctx, m)
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				e.warnOnce("panic", "the delivery handler panicked; treating it as a transient failure", "id", m.ID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				done <- fmt.Errorf("%w: %v", ErrHandlerPanic, v)
			}
		}()
		done <- e.opts.Deliverer.Deliver(ctx, m)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done:
			return err
		case <-time.After(abandonAfter):
			e.warnOnce("hung", "a delivery did not return after its context ended (the handler ignores its context?); treating it as a timeout", "id", m.ID)
			return fmt.Errorf("delivery of %s abandoned: %w", m.ID, context.DeadlineExceeded)
		}
	}
}

// abandonAfter is how long a delivery may run past its deadline before its
// slot is taken back.
const abandonAfter = 100 * time.Millisecond
