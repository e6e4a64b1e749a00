package engine

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// This file routes a finished delivery (apply): done, the next retry tier
// or the DLQ (retrytopics.Plan.Route), and builds the move a transaction
// will write.

// settle marks en settled: the next transaction takes its moves (see
// progress.go). The transaction is due before CommitInterval (commitSoon)
// once MaxPending/2 entries of en's queue settled since the last one: it
// then lets go of them before the queue fills and its partition pauses
// (pauses.go). A partition paused full of large records holds fewer than
// that: it is due once half of them settled.
//
// The rule counts per partition, as MaxPending is. Counting settled
// records over all partitions, as it did before, committed as soon as any
// 2,048 had settled: on Kafka, where a transaction takes ~15-40ms, half
// the transactions of a backlog then carried under 50 records and the
// transactions bounded the throughput (issue 10). Parking entries are
// settled by their own rules (see prepare) and make no transaction due.
func (c *core) settle(en *entry) {
	en.settled = true
	q := en.q
	if q.stage == parkStage {
		return
	}
	q.fresh++
	if q.fresh >= c.recordBound()/2 || q.paused && 2*q.fresh >= len(q.entries) && c.full(len(q.entries), q.bytes, true) {
		c.commitSoon = true
	}
}

// apply routes one finished delivery.
func (c *core) apply(r *result) {
	verdict := c.gateDone(r) // overload gate
	c.inflight--
	if r.retry {
		c.retrying--
	}
	if r.gen != c.gen {
		return // its shard was dropped; the record is delivered again
	}
	l, en := r.lane, r.en
	l.running = nil
	if r.err != nil && c.hard.Err() != nil {
		return // abandoned at shutdown: left uncommitted
	}
	v := c.observe(r)
	route := c.plan.Route(routeStage(en), v, retrytopics.Jitter())
	if held(verdict, route) { // overload gate: the dependency's failure consumes no attempt
		c.hold(l, en)
		return
	}
	if route.Action != retrytopics.Done {
		f := retrytopics.Failure{Class: route.Class, Status: v.Status, Message: v.Message, At: time.Now()}
		if route.Class == delivery.ClassExhausted {
			f.Message = "retry tiers exhausted; last error: " + v.Message
		}
		c.addMove(en, route, f)
		if last := en.moves[len(en.moves)-1].rec; c.tooLarge(last) {
			// The record cannot be written to its next stage at all. It
			// stays unsettled — never lost, never committed past — and
			// holds its lane and its partition's commit until an operator
			// raises the topic's max.message.bytes and restarts kretry.
			en.moves = en.moves[:len(en.moves)-1]
			l.running = en
			c.stats.Stuck.Add(1)
			c.log.Error("a record does not fit its next topic even with an empty error message; it holds its partition until max.message.bytes is raised there and kretry restarts",
				"id", en.origin.ID(), "topic", last.Topic, "record_bytes", retrytopics.RecordSize(last), "max_message_bytes", c.topics.MaxBytes[last.Topic])
			return
		}
	}
	c.settle(en)
	if c.parking() && l.keyed {
		c.afterDelivery(l, en, route)
	}
	c.markReady(l)
	c.forget(l)
}

// observe counts r's delivery, reports it to the observer and classifies
// its error: the verdict, nil when the delivery succeeded.
func (c *core) observe(r *result) *delivery.Verdict {
	en := r.en
	ev := DeliveryEvent{
		Group: c.opts.Group, Topic: en.q.topic, Partition: en.q.p, Source: c.plan.Source,
		Stage: stageName(en.q.stage), Outcome: flow.OutcomeOK, Duration: r.took, Attempt: r.msg.Attempt,
	}
	var v *delivery.Verdict
	if r.err != nil {
		vv := delivery.Classify(r.err, *c.opts.Statuses)
		v = &vv
		c.stats.Failed.Add(1)
		ev.Outcome, ev.Status, ev.ErrorType = flow.Outcome(vv.Class), vv.Status, delivery.ErrorType(r.err, vv)
		if vv.Unlisted {
			attrs := []any{"err", vv.Message}
			if vv.Status != 0 { // an HTTP answer; a handler's plain error has none
				attrs = append([]any{"status", vv.Status}, attrs...)
			}
			c.warnOnce("unlisted:"+ev.ErrorType, "delivery failed with an unlisted status or error; treating it as transient", attrs...)
		}
	} else {
		c.stats.Delivered.Add(1)
	}
	c.obs.Delivered(ev)
	return v
}

// routeStage is the stage en is routed from: its stage, 0 for a parked
// record (its first attempt) or a redriven one (see redriveRouteStage).
func routeStage(en *entry) int {
	stage := en.q.stage
	if stage == parkStage {
		stage = 0
	}
	return redriveRouteStage(en, stage)
}

// addMove builds en's move for route.
func (c *core) addMove(en *entry, route retrytopics.Route, f retrytopics.Failure) {
	m := retrytopics.Move{
		Origin:   *en.origin,
		Key:      en.rec.Key,
		Value:    en.rec.Value,
		Topic:    route.Topic,
		Failure:  f,
		Group:    c.opts.Group,
		Version:  flow.Version,
		MaxBytes: c.topics.MaxBytes[route.Topic],
	}
	ev := MoveEvent{Group: c.opts.Group, Source: c.plan.Source, From: en.q.topic, To: route.Topic, Class: string(route.Class)}
	switch route.Action {
	case retrytopics.Retry:
		m.Due = retrytopics.DueTime(f.At, route.Delay)
		ev.Kind, ev.Stage = flow.MoveRetry, stageName(route.Stage)
	case retrytopics.DeadLetter:
		ev.Kind, ev.Stage = flow.MoveDeadLetter, flow.StageDLQ
	}
	r := m.Record()
	// Stages are co-partitioned: the move stays on the partition it was read
	// from, whatever a (possibly forged) header says.
	r.Partition = en.q.p
	en.moves = append(en.moves, move{rec: r, ev: ev, due: m.Due})
}

// tooLarge reports whether r exceeds its topic's max.message.bytes.
func (c *core) tooLarge(r *kgo.Record) bool {
	n := c.topics.MaxBytes[r.Topic]
	return n > 0 && retrytopics.RecordSize(r) > n
}

// forget drops an idle keyed lane so that the lane map stays bounded by the
// keys in flight.
func (c *core) forget(l *lane) {
	if l.keyed && l.idle() && !l.queued {
		if cur, ok := l.sh.lanes[l.key]; ok && cur == l {
			delete(l.sh.lanes, l.key)
		}
	}
}

// attemptOf is the ce-attempt of a record with attempts deliveries behind
// it, saturating instead of wrapping.
func attemptOf(attempts int64) int {
	const most = 1<<31 - 1
	if attempts < 0 || attempts >= most {
		return most
	}
	return int(attempts) + 1
}
