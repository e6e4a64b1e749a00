package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
)

// This file runs the deliveries the core begins (launch, run, deliver)
// and feeds their results back (finish): the shell's side of dispatch.go.

// launch runs the deliveries rs that the core began; e.mu is held. Each
// joins its cohort's deadline (deadline.go) and counts in e.deliveries and
// Stats.InFlight (finish takes it out of both).
// With reuse the first is returned for the caller's goroutine to run
// instead of a new one (see run); the others get goroutines.
func (e *Engine) launch(rs []*result, reuse bool) (next *result) {
	if len(rs) == 0 {
		return nil
	}
	for i, r := range rs {
		e.stats.InFlight.Add(1)
		e.deliveries.Add(1)
		e.deadlines.join(r, r.start)
		if reuse && i == 0 {
			next = r
			continue
		}
		go e.run(r)
	}
	return next
}

// run delivers r on the calling goroutine, then each delivery that r's
// result hands it (launch with reuse): a goroutine per delivery cost a
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
	err := e.callSafely(r.ctx, r.msg)
	if !r.claimed.CompareAndSwap(false, true) {
		return nil // abandoned: the answer came too late
	}
	r.err, r.took = err, time.Since(r.start)
	return e.finish(r, true)
}

// abandonHung is the watchdog: called abandonAfter after cohort c's
// context ended, it abandons c's deliveries still running. Deliverers
// bound by their context have none: net/http ends a request when its
// context ends (delivery.HTTP, and wrappers of it such as delivery.Health).
func (e *Engine) abandonHung(c *cohort) {
	e.mu.Lock()
	hung := c.stillRunning()
	e.unlock()
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
		next = e.launch(e.startReady(), reuse)
	}
	early := e.commitSoon // a transaction is due: the loop must not wait out its poll
	e.unlock()
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
