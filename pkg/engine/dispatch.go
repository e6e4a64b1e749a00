package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// This file decides which deliveries may start now (startReady) and runs
// them (begin, run, deliver). startReady is the one place where a
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
	e.startReady(false)
}

// startReady starts deliveries of ready lanes while in-flight slots are
// free. A finished delivery calls it (not dispatch: its cost must not grow
// with the partitions), so a freed slot is used at once; with reuse, the
// first delivery started is returned for the caller's goroutine to run
// instead of a new one (see run), and the others get goroutines.
func (e *Engine) startReady(reuse bool) (next *result) {
	if e.stopping {
		return nil
	}
	begin := func(l *lane, t overload.Ticket) {
		r := e.begin(l, t)
		switch {
		case r == nil:
		case reuse && next == nil:
			next = r
		default:
			go e.run(r)
		}
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
		begin(l, t)
	}
	for len(e.ready) > 0 && e.inflight < e.opts.MaxInFlight {
		l, t, ok := e.take(&e.ready, now) // overload gate
		if !ok {
			break
		}
		begin(l, t)
	}
	return next
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
	// claimed: the delivery's answer, or its abandonment (see deliver),
	// has been taken; whichever comes second is ignored.
	claimed atomic.Bool
	// ctx is the delivery's context, its cohort's (deadline.go); prev and
	// next link the cohort's running deliveries (e.mu guards them).
	ctx        context.Context
	cohort     *cohort
	prev, next *result
}

// begin takes the next entry of lane l into delivery, admitted by ticket
// (overload gate; zero without one), and returns it for run; nil when the
// lane has nothing to deliver. e.mu is held.
func (e *Engine) begin(l *lane, ticket overload.Ticket) *result {
	l.queued = false
	if l.running != nil || len(l.wait) == 0 {
		return nil
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
	now := time.Now()
	en.started = now.Sub(monoStart)
	e.deliveries.Add(1)
	e.stats.InFlight.Add(1)
	r := &result{gen: e.gen, lane: l, en: en, retry: retry, msg: m, ticket: ticket}
	e.deadlines.join(r, now)
	return r
}

// run delivers r on the calling goroutine, then each delivery that r's
// result hands it (startReady with reuse): a goroutine per delivery cost a
// goroutine start and stack growth per record (issue 10's CPU per record).
// It returns when no delivery is handed over, or when a hung handler's
// delivery was abandoned.
func (e *Engine) run(r *result) {
	for r != nil {
		r = e.deliver(r)
	}
}

// deliver runs one delivery. The handler is called on this goroutine with
// r's context (DeliveryTimeout, and up to maxDeadlineSlack more; see
// deadline.go); a panic becomes ErrHandlerPanic (transient) instead of a
// crash of the process, and a handler that has not returned abandonAfter
// past its context's end is abandoned as a timeout by abandonHung: its
// slot is freed and its late answer ignored. It returns the next delivery
// for this goroutine, or nil.
func (e *Engine) deliver(r *result) *result {
	start := time.Now()
	err := e.callSafely(r.ctx, r.msg)
	if !r.claimed.CompareAndSwap(false, true) {
		return nil // abandoned: the answer came too late
	}
	r.err, r.took = err, time.Since(start)
	return e.finish(r, true)
}

// abandonHung is the watchdog: called abandonAfter after cohort c's
// context ended, it abandons c's deliveries still running. Deliverers
// bound by their context have none: net/http ends a request when its
// context ends (delivery.HTTP, and wrappers of it such as delivery.Health).
func (e *Engine) abandonHung(c *cohort) {
	e.mu.Lock()
	hung := c.stillRunning()
	e.mu.Unlock()
	for _, r := range hung {
		e.abandon(r)
	}
}

// abandon ends r as a timeout if its handler has not returned.
func (e *Engine) abandon(r *result) {
	if !r.claimed.CompareAndSwap(false, true) {
		return
	}
	e.warnOnce("hung", "a delivery did not return after its context ended (the handler ignores its context?); treating it as a timeout", "id", r.msg.ID)
	r.err = fmt.Errorf("delivery of %s abandoned: %w", r.msg.ID, context.DeadlineExceeded)
	r.took = time.Since(monoStart) - r.en.started
	e.finish(r, false)
}

// finish applies r's result and starts the next deliveries right here:
// going through the poll loop would leave the slot idle for a loop turn.
// With reuse the first of them is returned for the caller to run.
func (e *Engine) finish(r *result, reuse bool) (next *result) {
	e.stats.InFlight.Add(-1)
	e.mu.Lock()
	e.deadlines.leave(r)
	e.apply(r)
	if !e.needAbort.Load() {
		next = e.startReady(reuse)
	}
	early := e.commitSoon
	e.mu.Unlock()
	e.deliveries.Done()
	if early {
		e.wake() // a commit is due
	}
	return next
}

// ErrHandlerPanic wraps the value of a delivery that panicked; it is
// classified as transient.
var ErrHandlerPanic = errors.New("handler panicked")

// callSafely calls the deliverer, turning a panic into ErrHandlerPanic.
func (e *Engine) callSafely(ctx context.Context, m *delivery.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			e.warnOnce("panic", "the delivery handler panicked; treating it as a transient failure", "id", m.ID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			err = fmt.Errorf("%w: %v", ErrHandlerPanic, v)
		}
	}()
	return e.opts.Deliverer.Deliver(ctx, m)
}

// abandonAfter is how long a delivery may run past its deadline before its
// slot is taken back.
const abandonAfter = 100 * time.Millisecond
