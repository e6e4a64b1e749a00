package engine

// Overload control (issue 11, docs/OVERLOAD.md): the engine's side of an
// overload.Gate and of max_age. The policies decide in package overload;
// here the engine only gates the start of deliveries, holds records whose
// failed attempt does not count, pauses partitions and expires records.
// Every call into this file from the engine's other files is marked
// `// overload gate`.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// Actions for a record older than Options.MaxAge (Options.OnExpired).
const (
	// OnExpiredDeadLetter moves it to the DLQ with kretry-error-class
	// "expired" (the default).
	OnExpiredDeadLetter = "dead_letter"
	// OnExpiredDrop commits past it without writing it anywhere.
	OnExpiredDrop = "drop"
)

// take pops lanes off the front of *q until one may start now and
// returns it; false when the gate refuses the next one (it stays at the
// front) or *q ran out. Lanes whose head expired are settled on the way.
func (c *core) take(q *[]*lane, now time.Time) (*lane, overload.Ticket, bool) {
	var none overload.Ticket
	if g := c.opts.Overload; g != nil && g.Probing(now) {
		if !freshFirst(*q) && q == &c.retryReady && freshFirst(c.ready) {
			return nil, none, false // probe with a first attempt instead
		}
	}
	for len(*q) > 0 {
		l := (*q)[0]
		if l.running != nil || len(l.wait) == 0 {
			popFront(q)
			return l, none, true // start makes nothing of it, as before
		}
		en := l.wait[0]
		if c.expire(l, en, now) {
			popFront(q)
			l.queued = false
			c.markReady(l)
			c.forget(l)
			continue
		}
		var t overload.Ticket
		if g := c.opts.Overload; g != nil {
			var ok bool
			if t, ok = g.Admit(now, en.q.stage > 0, c.inflight); !ok {
				return nil, none, false
			}
		}
		popFront(q)
		return l, t, true
	}
	return nil, none, false
}

// freshFirst moves the newest lane whose next record is a first attempt
// from the source that was never held to the front of q and reports
// whether there was one: a probe should test the dependency as it is now,
// not a record that failed already (it may fail for reasons of its own),
// nor a parked record, whose key failed before (overload.Outcome.Released),
// nor the next of a block of records that failed together (a synchronised
// failure of many keys opens the breaker as an outage does; the records
// after it show that the app is fine).
func freshFirst(q []*lane) bool {
	for i := len(q) - 1; i >= 0; i-- {
		l := q[i]
		if en := l.wait; l.running == nil && len(en) > 0 && !en[0].held && en[0].q.stage == 0 { // the source
			copy(q[1:i+1], q[:i])
			q[0] = l
			return true
		}
	}
	return false
}

// gateDone tells the gate how r's delivery ended and returns its
// verdict: overload.Hold when its attempt must not count (the breaker is
// open or the guard tripped: the failure is the dependency's, not the
// record's), overload.Probe for a failed probe (it counts unless it
// would dead-letter the record; see held), overload.Spend for a failed
// probe that counts in any case.
func (c *core) gateDone(r *result) overload.Verdict {
	g := c.opts.Overload
	if g == nil {
		return overload.Count
	}
	t := r.ticket
	r.ticket = overload.Ticket{}
	o := overload.Outcome{Class: overload.OK, ID: r.en.origin.ID(), Key: string(r.en.rec.Key), Again: r.en.held,
		Redriven: r.en.origin.Redrives > 0, Released: r.en.q.stage == parkStage}
	if r.en.rec.Key == nil {
		o.Key = o.ID
	}
	if r.err != nil {
		v := delivery.Classify(r.err, *c.opts.Statuses)
		o.Class, o.Answer, o.Message = overload.Transient, delivery.ErrorType(r.err, v), v.Message
		if v.Class == delivery.ClassPermanent {
			o.Class = overload.Permanent
		} else {
			o.Last = c.plan.Route(routeStage(r.en), &v, 0).Action == retrytopics.DeadLetter
		}
		if c.hard.Err() != nil && errors.Is(r.err, context.Canceled) {
			o.Class = overload.Cancelled
		}
	}
	if r.err == nil {
		g.Done(time.Now(), t, o)
		return overload.Count
	}
	return g.Done(time.Now(), t, o)
}

// held reports whether a failed delivery routed to route must not count.
func held(v overload.Verdict, route retrytopics.Route) bool {
	return v == overload.Hold || v == overload.Probe && route.Action == retrytopics.DeadLetter
}

// hold puts en back at the head of its lane: its attempt did not count,
// and it is delivered again, with the same attempt number, when the gate
// admits it.
func (c *core) hold(l *lane, en *entry) {
	en.held = true
	l.wait = append([]*entry{en}, l.wait...)
	c.markReady(l)
}

// gatePaused reports whether the gate pauses the source (tier false) or
// the tiers.
func (c *core) gatePaused(now time.Time, tier bool) bool {
	return c.opts.Overload != nil && c.opts.Overload.Paused(now, tier)
}

// gateWake is when the gate may admit again without a delivery ending.
func (c *core) gateWake() (time.Time, bool) {
	if c.opts.Overload == nil {
		return time.Time{}, false
	}
	return c.opts.Overload.Wake(time.Now())
}

// expire settles en without delivering it when it is older than MaxAge
// (by its original timestamp): a move to the DLQ as "expired", or none
// with OnExpiredDrop. It reports whether it did.
func (c *core) expire(l *lane, en *entry, now time.Time) bool {
	ts := en.origin.Timestamp
	if c.opts.MaxAge <= 0 || ts.IsZero() || now.Sub(ts) <= c.opts.MaxAge {
		return false
	}
	route := retrytopics.Route{Action: retrytopics.Done}
	if c.opts.OnExpired != OnExpiredDrop {
		route = retrytopics.Route{Action: retrytopics.DeadLetter, Topic: c.plan.DLQ, Class: delivery.ClassExpired}
		age := now.Sub(ts).Round(time.Millisecond)
		c.addMove(en, route, retrytopics.Failure{Class: delivery.ClassExpired, At: now,
			Message: fmt.Sprintf("expired: the record is %s old, max_age is %s; not delivered", age, c.opts.MaxAge)})
		if last := en.moves[len(en.moves)-1].rec; c.tooLarge(last) {
			en.moves = en.moves[:len(en.moves)-1]
			return false // deliver it instead: never stuck for want of an error text
		}
	}
	popFront(&l.wait)
	if g := c.opts.Overload; g != nil {
		g.Expired(c.expiredAction())
	}
	c.warnOnce("expired", "records older than max_age are not delivered", "max_age", c.opts.MaxAge.String(), "on_expired", c.expiredAction(), "first_id", en.origin.ID())
	c.settle(en)
	if c.parking() && l.keyed {
		c.afterDelivery(l, en, route)
	}
	return true
}

func (c *core) expiredAction() string {
	if c.opts.OnExpired == OnExpiredDrop {
		return OnExpiredDrop
	}
	return OnExpiredDeadLetter
}
