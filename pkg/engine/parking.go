package engine

import (
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/parking"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// The parking partition is the changelog of its blocked keys; its format
// and the replay rules are documented in package parking.

// Names kept in this package for its callers and tests.
const (
	HeaderParkingOp     = parking.HeaderOp
	HeaderParkingRef    = parking.HeaderRef
	HeaderParkingOrigin = parking.HeaderOrigin
	OriginOperator      = parking.OriginOperator

	opBlock   = parking.OpBlock
	opRelease = parking.OpRelease
	opSettle  = parking.OpSettle
	opUnblock = parking.OpUnblock
	opBarrier = parking.OpBarrier
)

// OperatorRelease is parking.OperatorRelease.
func OperatorRelease(parkingTopic string, p int32, key []byte) *kgo.Record {
	return parking.OperatorRelease(parkingTopic, p, key)
}

// opRecord builds an op record for partition p of the parking topic.
func (c *core) opRecord(p int32, key []byte, op, ref string) *kgo.Record {
	return parking.OpRecord(c.opts.ParkingTopic, p, key, op, ref)
}

func (c *core) barrierRecord(sh *shard) *kgo.Record {
	return c.opRecord(sh.p, nil, opBarrier, sh.nonce)
}

func opOf(r *kgo.Record) (op, ref, origin string, ok bool) {
	o, ok := parking.ParseOp(r)
	return o.Kind, o.Ref, o.Origin, ok
}

// laneKeyOf is the lane key of a parking record with key: the key, or ""
// for ordering partition.
func (c *core) laneKeyOf(key []byte) []byte {
	if c.opts.Ordering == flow.OrderingPartition {
		return []byte{}
	}
	return key
}

// park moves source entry en of blocked lane l to the parking topic. prev
// is the lane's source record before en: en's park move is written with or
// after prev's outcome (progress.go), so that the parking topic never holds
// en while prev is still to be delivered, parked or moved.
func (c *core) park(l *lane, en *entry, prev *entry) {
	if prev != nil && prev.q == en.q && !prev.moved {
		if en.q.behind == nil {
			en.q.behind = map[*entry]*entry{}
		}
		en.q.behind[en] = prev
	}
	l.tail = en
	m := retrytopics.Move{
		Origin:   *en.origin,
		Key:      en.rec.Key,
		Value:    en.rec.Value,
		Topic:    c.opts.ParkingTopic,
		Failure:  retrytopics.Failure{At: time.Now()},
		Group:    c.opts.Group,
		Version:  flow.Version,
		MaxBytes: c.topics.MaxBytes[c.opts.ParkingTopic],
		Parked:   true,
	}
	r := m.Record()
	r.Partition = en.q.p
	if c.tooLarge(r) {
		// Held unsettled, like a move that cannot fit (see apply): never
		// lost, never committed past, loud. Counted as on its way to
		// parking, it keeps its key blocked, and the key's later records
		// park behind it (their behind) until a restart after
		// max.message.bytes is raised.
		l.park.Park()
		c.stats.ParkedRecords.Add(1)
		c.stats.Stuck.Add(1)
		c.log.Error("a record does not fit the parking topic; it holds its partition until max.message.bytes is raised there and kretry restarts",
			"id", en.origin.ID(), "topic", r.Topic, "record_bytes", retrytopics.RecordSize(r), "max_message_bytes", c.topics.MaxBytes[r.Topic])
		return
	}
	en.moves = append(en.moves, move{rec: r, ev: MoveEvent{
		Group: c.opts.Group, Source: c.plan.Source, From: en.q.topic, To: c.opts.ParkingTopic, Kind: flow.MovePark, Stage: flow.StageParking,
	}})
	c.settle(en)
	l.park.Park()
	l.sh.parkingBytes += len(r.Key) + len(r.Value)
	c.stats.ParkedRecords.Add(1)
	c.syncBlocked(l)
}

// readBack adds parked record en, read from the parking partition, to
// lane l's parked records, and reports whether it was one of the moves
// parked here (false: written by a previous owner). A move parked here
// leaves sh.parkingBytes as its record joins the parking queue's bytes.
func (c *core) readBack(l *lane, en *entry) bool {
	if !l.park.ReadBack(en) {
		return false
	}
	l.sh.parkingBytes = max(0, l.sh.parkingBytes-len(en.rec.Key)-len(en.rec.Value))
	return true
}

// untail clears the tail of the lane of source entry en, parked and now
// taken by a transaction, so that a blocked key does not keep it alive.
func (c *core) untail(en *entry) {
	if len(en.moves) == 0 || en.moves[0].ev.Kind != flow.MovePark {
		return
	}
	sh := c.shards[en.q.p]
	if sh == nil {
		return
	}
	if l := sh.lanes[string(c.laneKeyOf(en.rec.Key))]; l != nil && l.tail == en {
		l.tail = nil
	}
}

// syncBlocked keeps the BlockedKeys and HeldKeys gauges and its shard's
// counts in step with l: the one place that sets lane.counted and
// lane.heldCounted.
func (c *core) syncBlocked(l *lane) {
	if d := recount(&l.counted, l.keyed && l.blocked()); d != 0 {
		l.sh.blocked += d
		c.stats.BlockedKeys.Add(int64(d))
	}
	if d := recount(&l.heldCounted, l.keyed && l.park.State() == parking.Held); d != 0 {
		l.sh.held += d
		c.stats.HeldKeys.Add(int64(d))
	}
}

// recount sets *counted to now and returns the change in a count of such
// flags: 1, -1 or 0.
func recount(counted *bool, now bool) int {
	if *counted == now {
		return 0
	}
	*counted = now
	if now {
		return 1
	}
	return -1
}

// spillAfter is how long a delivery may hold its partition's committed
// offset before the records of its key waiting behind it are parked
// (ordering key): a slow key then holds the committed offset back by one
// delivery, not by its whole backlog, and never parks a healthy key.
const spillAfter = 100 * time.Millisecond

// maybeSpill spills the lane of sh's oldest unsettled source record when
// that record has been in delivery longer than spillAfter and records of
// its key wait behind it.
func (c *core) maybeSpill(sh *shard, now time.Time) {
	for _, en := range sh.src.entries {
		if en.settled {
			continue
		}
		l := c.laneFor(sh, en.rec.Key)
		if l.keyed && l.running == en && now.Sub(monoStart)-en.started > spillAfter && len(l.wait) > 0 {
			c.spill(l)
		}
		return
	}
}

// spill parks the source records waiting in lane l behind its running one;
// they are delivered in order from the parking topic once it finishes.
func (c *core) spill(l *lane) {
	c.parkWaiting(l, l.running)
	l.park.Spill()
	c.syncBlocked(l)
}

// releaseArg is what names a held key to `kretry parking release`: the
// partition with ordering partition (one lane per partition, its ops keyed
// empty), --key for a key a shell takes as it is, else --key-hex.
func releaseArg(o flow.Ordering, p int32, key []byte) string {
	switch {
	case o == flow.OrderingPartition:
		return "--partition " + strconv.Itoa(int(p))
	case len(key) > 0 && strings.Trim(string(key), "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=+@%,") == "":
		return "--key " + string(key)
	}
	return "--key-hex " + hex.EncodeToString(key)
}

// afterDelivery updates the parking state of keyed lane l after en's
// delivery was routed.
func (c *core) afterDelivery(l *lane, en *entry, route retrytopics.Route) {
	sh := l.sh
	key := c.laneKeyOf(en.rec.Key)
	stage := en.q.stage
	if stage == parkStage {
		en.moves = append(en.moves, move{rec: c.opRecord(sh.p, key, opSettle, strconv.FormatInt(en.rec.Offset, 10))})
		c.stats.ParkedRecords.Add(-1)
	}
	switch {
	case route.Action == retrytopics.Retry && (stage == 0 || stage == parkStage):
		c.blockKey(l, en, key)
	case stage > 0 && route.Action != retrytopics.Retry && l.park.HasHead(en.origin.ID()):
		// The head left the tiers. (A tier record that is not a current head
		// — a copy delivered again after a crash — changes nothing.)
		id := en.origin.ID()
		last := l.park.LeaveHead(id)
		verdict := parking.VerdictOK
		if route.Action == retrytopics.DeadLetter {
			verdict = string(c.opts.OnDeadLetter)
		}
		ref := parking.ReleaseRef(verdict, id)
		en.moves = append(en.moves, move{rec: c.opRecord(sh.p, key, opRelease, ref)})
		if last {
			l.park.Resolve(verdict, id)
			if l.park.State() == parking.DeadLettering {
				// The parked records follow the head into the DLQ only once
				// the head's own DLQ write committed, so the DLQ keeps the
				// key's order.
				l.dlqGate = true
				en.after = append(en.after, func() {
					l.dlqGate = false
					c.feed(l, nil)
				})
			}
			if verdict != parking.VerdictOK {
				// key as text, as the "operator released a key" line prints it.
				args := []any{"partition", sh.p, "key", string(key), "id", en.origin.ID(), "policy", string(c.opts.OnDeadLetter), "parked", l.park.Parked()}
				if c.opts.OnDeadLetter == flow.OnDeadLetterHold {
					args = append(args, "hint", "release with `kretry parking release -c CONFIG --topic "+c.plan.Source+" "+releaseArg(c.opts.Ordering, sh.p, key)+"` (CONFIG: the config file of this kretry run, or set KRETRY_CONFIG)")
				}
				c.log.Info("head of a blocked key dead-lettered", args...)
			}
		}
	case stage == parkStage && route.Action == retrytopics.DeadLetter && c.opts.OnDeadLetter == flow.OnDeadLetterRelease:
		l.park.SetGap(en.origin.ID()) // the next released record follows a gap
	}
	c.feed(l, en)
}

// blockKey makes en, which just failed transiently from the source or
// the parking topic, the new head of its key: the key blocks (a block op
// in en's transaction) and the source records waiting behind it park.
func (c *core) blockKey(l *lane, en *entry, key []byte) {
	l.park.Block(en.origin.ID())
	l.blockWritten = true
	c.leadWithUnblock(l, en)
	en.moves = append(en.moves, move{rec: c.opRecord(l.sh.p, key, opBlock, en.origin.ID())})
	c.parkWaiting(l, en)
}

// parkWaiting parks the source records waiting in lane l, in order, the
// first behind prev; tier records stay waiting.
func (c *core) parkWaiting(l *lane, prev *entry) {
	var keep []*entry
	for _, w := range l.wait {
		if w.q.stage == 0 {
			c.park(l, w, prev)
			prev = w
		} else {
			keep = append(keep, w)
		}
	}
	l.wait = keep
}

// feed moves the release of lane l along: the next parked record to the
// lane (one at a time, in order), or every parked record to the DLQ under
// flow.OnDeadLetterDeadLetter, and unblocks the key when nothing is left. carrier
// is the entry whose transaction carries any op this writes; nil writes
// them with the next transaction.
func (c *core) feed(l *lane, carrier *entry) {
	defer c.syncBlocked(l) // also after a release's first record: held no more
	if !l.dlqGate {
		for _, p := range l.park.TakeForDLQ() {
			c.addMove(p, retrytopics.Route{Action: retrytopics.DeadLetter, Topic: c.plan.DLQ, Class: delivery.ClassPermanent},
				retrytopics.Failure{Class: delivery.ClassPermanent, Message: "parked behind dead-lettered record " + l.park.Gap() + " (on_dead_letter: dead_letter)", At: time.Now()})
			p.moves = append(p.moves, move{rec: c.opRecord(l.sh.p, c.laneKeyOf(p.rec.Key), opSettle, strconv.FormatInt(p.rec.Offset, 10))})
			p.settled = true
			c.stats.ParkedRecords.Add(-1)
		}
	}
	if l.running == nil && len(l.wait) == 0 {
		if p, gap, ok := l.park.NextRelease(); ok {
			p.gapAfter = gap
			c.push(l, p)
			return
		}
		l.park.ReleaseDone()
	}
	c.maybeUnblock(l, carrier)
}

// maybeUnblock writes the unblock op of a key that has nothing left in the
// tiers or parked; its block and release ops settle once that op commits.
//
// The replay applies a key's ops in changelog order, and an unblock clears
// the key's heads: it must precede every op of the key's next block. Its
// carrier alone does not guarantee that. A transaction writes the source's
// moves before the tiers' and the parking topic's, and may leave a settled
// entry for a later transaction (the metadata budget, progress.go); so the
// block op of a record delivered right after the unblock could be written
// before the unblock, in the same transaction or an earlier one, and a
// successor would replay the key as not blocked. So until its carrier is
// handed to a transaction the op stays pending on the lane, and the key's
// next block takes it along (leadWithUnblock).
func (c *core) maybeUnblock(l *lane, carrier *entry) {
	if !l.keyed || l.blocked() || !l.blockWritten {
		return
	}
	key := []byte(l.key)
	if c.opts.Ordering == flow.OrderingPartition {
		key = []byte{}
	}
	markers := l.markers
	l.markers = nil
	l.blockWritten = false
	op := move{rec: c.opRecord(l.sh.p, key, opUnblock, "")}
	u := &pendingUnblock{carrier: carrier, rec: op.rec}
	u.settle = func() {
		for _, m := range markers {
			m.settled = true
		}
		if l.unblock == u {
			l.unblock = nil
		}
		c.forget(l)
	}
	if carrier == nil {
		// Loose ops lead the next transaction: no op decided after this one
		// can precede it.
		c.loose = append(c.loose, op)
		c.looseAfter = append(c.looseAfter, u.settle)
		return
	}
	l.unblock = u
	carrier.moves = append(carrier.moves, op)
	carrier.after = append(carrier.after, func() {
		if !u.moved {
			u.settle()
		}
	})
}

// pendingUnblock is a key's unblock op on its carrier entry.
type pendingUnblock struct {
	carrier *entry
	rec     *kgo.Record
	settle  func() // once the op committed
	moved   bool   // taken along by the key's next block
}

// leadWithUnblock moves the pending unblock op of lane l, if its carrier is
// not yet in a transaction, to en, which is about to carry the block op of
// the key's next head: the unblock then precedes it in the same
// transaction. A carrier already in a transaction wrote the unblock in an
// earlier one than en's.
func (c *core) leadWithUnblock(l *lane, en *entry) {
	u := l.unblock
	if u == nil {
		return
	}
	l.unblock = nil
	if u.carrier.moved || u.carrier == en {
		return
	}
	u.carrier.moves = slices.DeleteFunc(u.carrier.moves, func(m move) bool { return m.rec == u.rec })
	u.moved = true
	en.moves = append(en.moves, move{rec: u.rec})
	en.after = append(en.after, u.settle)
}
