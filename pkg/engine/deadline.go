package engine

import (
	"context"
	"time"
)

// This file gives deliveries their context and takes back the slots of
// handlers that hang. A context.WithTimeout per delivery, with a
// context.AfterFunc as its watchdog, cost about 5µs of CPU per record on the
// embedded broker (a timer, and a child registered with the parent under
// its lock, for every record; issue 10's CPU per record). Deliveries that
// start within the same slack instead share one context, and one watchdog
// per shared context looks at what is still running when it ends.

// maxDeadlineSlack bounds how much later than DeliveryTimeout a delivery's
// context may end: deliveries starting within one slack share a deadline,
// the latest of theirs.
const maxDeadlineSlack = 10 * time.Millisecond

// cohort is the deliveries that started within one slack: they share ctx,
// whose deadline is DeliveryTimeout after the last of them could start.
// running lists those not finished (an intrusive list, so adding and
// removing cost no allocation); e.mu guards it.
type cohort struct {
	ctx     context.Context
	until   time.Time // deliveries starting before until join this cohort
	running *result
	// release ends ctx and drops its watchdog: called once no delivery
	// can join (a newer cohort is current) and none runs, so a cohort
	// does not outlive its deliveries by up to DeliveryTimeout.
	release func()
}

// deadlines hands out cohorts; e.mu guards it.
type deadlines struct {
	parent  context.Context
	timeout time.Duration
	slack   time.Duration
	cur     *cohort
	// ended is called abandonAfter after a cohort's context has ended,
	// with its deliveries then still running (nil: no watchdog).
	ended func(*cohort)
}

func newDeadlines(parent context.Context, timeout time.Duration, ended func(*cohort)) *deadlines {
	return &deadlines{parent: parent, timeout: timeout, slack: min(timeout/100, maxDeadlineSlack), ended: ended}
}

// join adds r, starting at now, to the current cohort (a new one once its
// slack has passed) and sets r's context.
func (d *deadlines) join(r *result, now time.Time) {
	c := d.cur
	if c == nil || !now.Before(c.until) {
		if c != nil && c.running == nil {
			c.release()
		}
		c = &cohort{until: now.Add(d.slack)}
		ctx, cancel := context.WithDeadline(d.parent, c.until.Add(d.timeout))
		c.ctx = ctx
		stop := context.AfterFunc(ctx, func() {
			cancel()
			if d.ended != nil {
				time.AfterFunc(abandonAfter, func() { d.ended(c) })
			}
		})
		c.release = func() { stop(); cancel() }
		d.cur = c
	}
	r.cohort, r.ctx = c, c.ctx
	r.next = c.running
	if c.running != nil {
		c.running.prev = r
	}
	c.running = r
}

// leave takes r off its cohort's running list, and releases the cohort
// when r was the last delivery it will have.
func (d *deadlines) leave(r *result) {
	c := r.cohort
	if r.prev != nil {
		r.prev.next = r.next
	} else if c.running == r {
		c.running = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	}
	r.prev, r.next = nil, nil
	if c.running == nil && c != d.cur {
		c.release()
	}
}

// stillRunning lists c's deliveries not finished.
func (c *cohort) stillRunning() []*result {
	var out []*result
	for r := c.running; r != nil; r = r.next {
		out = append(out, r)
	}
	return out
}
