package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// This file decides which deliveries may start now (startReady, begin);
// deliver.go runs them. startReady is the one place where a
// delivery starts: a policy that may refuse or delay a start (the overload
// gate: breaker, retry budget, rate limit) plugs in there, and pauses
// partitions through updatePauses (pauses.go).

// dispatch is the loop's turn over every shard: due tier records go to
// their lanes, a slow key's waiting records spill to parking, pauses are
// decided; then the ready deliveries begin (startReady), returned for the
// shell to run.
func (c *core) dispatch(now time.Time) []*result {
	if c.stopping {
		return nil
	}
	c.takeDue(now)
	for _, sh := range c.shards {
		if sh.restoring {
			continue
		}
		if c.opts.Ordering == flow.OrderingKey {
			c.maybeSpill(sh, now)
		}
		c.updatePauses(sh, now)
	}
	return c.startReady()
}

// takeDue hands the tier records due at now to their lanes, partition by
// partition in due order (c.due), and decides those partitions' pauses.
// Both dispatch and startReady call it: a retry falls due while the loop
// may be waiting on a transaction, and a delivery's end then starts it.
func (c *core) takeDue(now time.Time) {
	for {
		q, due, ok := c.due.Next()
		if !ok || due.After(now) {
			return
		}
		sh := c.shards[q.p]
		for _, en := range q.due.TakeDue(now) {
			c.push(c.laneFor(sh, en.rec.Key), en)
		}
		c.schedule(q)
		c.updatePauses(sh, now)
	}
}

// schedule keeps tier queue q's place on c.due: the due time of its next
// record, none when no record waits.
func (c *core) schedule(q *queue) {
	if d, ok := q.due.NextDue(); ok {
		c.due.Set(q, d)
	} else {
		c.due.Delete(q)
	}
}

// startReady begins deliveries of ready lanes while in-flight slots are
// free and returns them for the shell to run (in c.started, reused by the
// next call). A finished delivery calls it (not dispatch: its cost must
// not grow with the partitions), so a freed slot is used at once.
func (c *core) startReady() []*result {
	clear(c.started) // the buffer must not keep finished deliveries alive
	c.started = c.started[:0]
	if c.stopping {
		return nil
	}
	// Retries go first, up to their share, so a backlog of first attempts
	// cannot make them late; first attempts take every slot left, and at
	// least the share retries may not use.
	retryCap := max(1, int(c.opts.RetryShare*float64(c.opts.MaxInFlight)))
	now := time.Now()
	c.takeDue(now)
	for len(c.retryReady) > 0 && c.inflight < c.opts.MaxInFlight && c.retrying < retryCap {
		l, t, ok := c.take(&c.retryReady, now) // overload gate
		if !ok {
			break
		}
		c.begin(l, t, now)
	}
	for len(c.ready) > 0 && c.inflight < c.opts.MaxInFlight {
		l, t, ok := c.take(&c.ready, now) // overload gate
		if !ok {
			break
		}
		c.begin(l, t, now)
	}
	return c.started
}

// nextDue returns when the loop must next look at the tiers: the earliest
// due time of a tier record not yet handed to its lane, or, for a tier
// paused while its next record waits, tierLead before it, when the tier
// resumes (pauses.go).
func (c *core) nextDue() (time.Time, bool) {
	var next time.Time
	for _, sh := range c.shards {
		if sh.restoring {
			continue
		}
		for _, q := range sh.tiers {
			d, ok := q.due.NextDue()
			if !ok {
				continue
			}
			if q.paused {
				d = d.Add(-c.tierLead())
			}
			if next.IsZero() || d.Before(next) {
				next = d
			}
		}
	}
	return next, !next.IsZero()
}

// pollWait is how long the loop's poll may wait at now for records: until
// the next transaction is due (CommitInterval after the last, txnDue), the
// next tier record falls due (nextDue) or the overload gate wakes; at
// least 1ms. Counted from the poll instead of the last transaction, a
// loop that found no records near the end of one interval waited out a
// second one, and the retry moves settled in it were written up to two
// intervals after their failures, their retries late by as much (issue
// 10).
func (c *core) pollWait(now time.Time) time.Duration {
	next := c.lastCommit.Add(c.opts.CommitInterval)
	if d, ok := c.nextDue(); ok && d.Before(next) {
		next = d
	}
	if d, ok := c.gateWake(); ok && d.Before(next) { // overload gate
		next = d
	}
	return max(next.Sub(now), time.Millisecond)
}

// tierLead is how long before its next record is due a waiting tier
// partition resumes, so that the records behind it are fetched by their
// own due times: franz-go does not cut short a fetch in flight when a
// partition resumes, so a resumed partition's records come up to
// FetchMaxWait later.
func (c *core) tierLead() time.Duration { return 2 * c.opts.FetchMaxWait }

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
	// start is when the core began the delivery: its deadline and its
	// took count from it (one clock read per delivery fewer than reading
	// it again where the handler is called).
	start time.Time
	// claimed: the delivery's answer, or its abandonment (see deliver),
	// has been taken; whichever comes second is ignored.
	claimed atomic.Bool
	// ctx is the delivery's context, its cohort's (deadline.go); prev and
	// next link the cohort's running deliveries (e.mu guards them).
	ctx        context.Context
	cohort     *cohort
	prev, next *result
}

// begin takes the next entry of lane l into delivery at now, admitted by
// ticket (overload gate; zero without one), and adds it to c.started;
// nothing when the lane has nothing to deliver.
func (c *core) begin(l *lane, ticket overload.Ticket, now time.Time) {
	l.queued = false
	if l.running != nil || len(l.wait) == 0 {
		return
	}
	en := popFront(&l.wait)
	l.running = en
	retry := en.q.stage != 0
	c.inflight++
	if retry {
		c.retrying++
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
	en.started = now.Sub(monoStart)
	c.started = append(c.started, &result{gen: c.gen, lane: l, en: en, retry: retry, msg: m, ticket: ticket, start: now})
}
