package engine

// The parking partition read back on assignment: each record is replayed
// into its key's parking state (parking.go) until the barrier this
// instance wrote; then the restore finishes and the parked records flow.

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/parking"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// acceptParking takes record r read from the parking partition q.
func (c *core) acceptParking(sh *shard, q *queue, r *kgo.Record) {
	op, ref, origin, isOp := opOf(r)
	var en *entry
	if isOp {
		en = c.newEntry(q, r, nil)
	} else {
		o, _ := retrytopics.ReadOrigin(r, false, 0)
		en = c.newEntry(q, r, &o)
	}
	if sh.restoring {
		c.replay(sh, en, r, isOp, op, ref, origin)
		return
	}
	if !isOp {
		// One of ours, read back: it joins the key's parked records.
		l := c.laneFor(sh, c.laneKeyOf(r.Key))
		if !c.readBack(l, en) {
			c.stats.ParkedRecords.Add(1) // not counted when decided (written by someone else)
		}
		c.feed(l, en)
		return
	}
	l := c.laneFor(sh, r.Key)
	switch {
	case op == opRelease && origin == OriginOperator:
		c.log.Info("operator released a key", "partition", sh.p, "key", string(r.Key))
		en.settled = true
		if l.park.OperatorRelease() {
			c.feed(l, en)
		}
	case (op == opBlock || op == opRelease) && l.blockWritten:
		// Our own op read back: it stays unsettled (the committed offset
		// of the parking partition stays before it) until the key unblocks.
		l.markers = append(l.markers, en)
	default:
		en.settled = true
	}
	c.forget(l)
}

// replay applies one changelog record, r (its entry en), while the shard
// restores.
func (c *core) replay(sh *shard, en *entry, r *kgo.Record, isOp bool, op, ref, origin string) {
	if !isOp {
		c.readBack(c.laneFor(sh, c.laneKeyOf(r.Key)), en)
		return
	}
	if op == opBarrier {
		en.settled = true
		if ref == sh.nonce {
			c.finishRestore(sh, en)
		}
		return
	}
	key := r.Key
	if key == nil && c.opts.Ordering == flow.OrderingPartition {
		key = []byte{}
	}
	if key == nil {
		en.settled = true // an op must name its key: not one of ours
		c.warnOnce("op-nil-key", "parking op without a key ignored", "partition", sh.p, "offset", r.Offset, "op", op)
		return
	}
	l := c.laneFor(sh, key)
	switch op {
	case opBlock:
		l.park.Block(ref)
		l.blockWritten = true
		l.markers = append(l.markers, en)
	case opRelease:
		replayRelease(l, en, ref, origin)
	case opSettle:
		en.settled = true
		replaySettle(l, ref)
	case opUnblock:
		en.settled = true
		for _, m := range l.markers {
			m.settled = true
		}
		l.markers = nil
		l.park.Unblock()
		l.blockWritten = false
	default:
		en.settled = true
	}
}

// replayRelease applies a release op read back from the changelog: an
// operator's releases the key at once; the engine's leaves the head it
// names with its verdict, when the key's block was read back too.
func replayRelease(l *lane, en *entry, ref, origin string) {
	if origin == OriginOperator {
		en.settled = true
		l.park.OperatorRelease()
		return
	}
	verdict, id := parking.SplitRef(ref)
	if !l.blockWritten || !l.park.HasHead(id) {
		en.settled = true // a release without its block: not one of ours
		return
	}
	l.markers = append(l.markers, en)
	if l.park.LeaveHead(id) {
		l.park.Resolve(verdict, id)
	}
}

// replaySettle applies a settle op: the parked record at the offset it
// names was moved (delivered or dead-lettered) before the restart.
func replaySettle(l *lane, ref string) {
	off, err := strconv.ParseInt(ref, 10, 64)
	if err != nil {
		return
	}
	if p, ok := l.park.RemoveParked(func(p *entry) bool { return p.rec.Offset == off }); ok {
		p.settled = true
		p.moved = true
	}
}

// finishRestore ends a shard's replay at its barrier: blocked keys resume
// their release, the backlog of source and tier records is taken in order
// and the partitions resume.
func (c *core) finishRestore(sh *shard, barrier *entry) {
	sh.restoring = false
	blocked, parked := 0, 0
	for _, l := range sh.lanes {
		l.park.Restored()
		if l.blocked() {
			blocked++
		}
		parked += l.park.ParkedRecords()
		c.feed(l, barrier)
		c.syncBlocked(l)
	}
	c.stats.ParkedRecords.Add(int64(parked))
	if blocked > 0 || parked > 0 {
		c.log.Info("partition restored from the parking topic", "partition", sh.p, "blocked_keys", blocked, "parked_records", parked)
	}
	backlog := sh.backlog
	sh.backlog, sh.backlogBytes = nil, 0
	for _, r := range backlog {
		c.accept(sh, sh.queues[r.Topic], r)
	}
	c.updatePauses(sh, time.Now())
}
