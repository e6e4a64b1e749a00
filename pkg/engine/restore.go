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
func (e *Engine) acceptParking(sh *shard, q *queue, r *kgo.Record) {
	op, ref, origin, isOp := opOf(r)
	var en *entry
	if isOp {
		en = e.newEntry(q, r, nil)
	} else {
		o, _ := retrytopics.ReadOrigin(r, false, 0)
		en = e.newEntry(q, r, &o)
	}
	if sh.restoring {
		e.replay(sh, en, r, isOp, op, ref, origin)
		return
	}
	if !isOp {
		// One of ours, read back: it joins the key's parked records.
		l := e.laneFor(sh, e.laneKeyOf(r.Key))
		if !l.park.ReadBack(en) {
			e.stats.ParkedRecords.Add(1) // not counted when decided (written by someone else)
		}
		e.feed(l, en)
		return
	}
	l := e.laneFor(sh, r.Key)
	switch {
	case op == opRelease && origin == OriginOperator:
		e.log.Info("operator released a key", "partition", sh.p, "key", string(r.Key))
		en.settled = true
		if l.park.OperatorRelease() {
			e.feed(l, en)
		}
	case (op == opBlock || op == opRelease) && l.blockWritten:
		// Our own op read back: it stays unsettled (the committed offset
		// of the parking partition stays before it) until the key unblocks.
		l.markers = append(l.markers, en)
	default:
		en.settled = true
	}
	e.forget(l)
}

// replay applies one changelog record, r (its entry en), while the shard
// restores.
func (e *Engine) replay(sh *shard, en *entry, r *kgo.Record, isOp bool, op, ref, origin string) {
	if !isOp {
		e.laneFor(sh, e.laneKeyOf(r.Key)).park.ReadBack(en)
		return
	}
	if op == opBarrier {
		en.settled = true
		if ref == sh.nonce {
			e.finishRestore(sh, en)
		}
		return
	}
	key := r.Key
	if key == nil && e.opts.Ordering == flow.OrderingPartition {
		key = []byte{}
	}
	if key == nil {
		en.settled = true // an op must name its key: not one of ours
		e.warnOnce("op-nil-key", "parking op without a key ignored", "partition", sh.p, "offset", r.Offset, "op", op)
		return
	}
	l := e.laneFor(sh, key)
	switch op {
	case opBlock:
		l.park.Block(ref)
		l.blockWritten = true
		l.markers = append(l.markers, en)
	case opRelease:
		if origin == OriginOperator {
			en.settled = true
			l.park.OperatorRelease()
			break
		}
		verdict, id := parking.SplitRef(ref)
		if !l.blockWritten || !l.park.HasHead(id) {
			en.settled = true // a release without its block: not one of ours
			break
		}
		l.markers = append(l.markers, en)
		if l.park.LeaveHead(id) {
			l.park.Resolve(verdict, id)
		}
	case opSettle:
		en.settled = true
		off, err := strconv.ParseInt(ref, 10, 64)
		if err != nil {
			return
		}
		if p, ok := l.park.RemoveParked(func(p *entry) bool { return p.rec.Offset == off }); ok {
			p.settled = true
			p.moved = true
		}
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

// finishRestore ends a shard's replay at its barrier: blocked keys resume
// their release, the backlog of source and tier records is taken in order
// and the partitions resume.
func (e *Engine) finishRestore(sh *shard, barrier *entry) {
	sh.restoring = false
	blocked, parked := 0, 0
	for _, l := range sh.lanes {
		l.park.Restored()
		if l.blocked() {
			blocked++
		}
		parked += l.park.ParkedRecords()
		e.feed(l, barrier)
		e.syncBlocked(l)
	}
	e.stats.ParkedRecords.Add(int64(parked))
	if blocked > 0 || parked > 0 {
		e.log.Info("partition restored from the parking topic", "partition", sh.p, "blocked_keys", blocked, "parked_records", parked)
	}
	backlog := sh.backlog
	sh.backlog = nil
	for _, r := range backlog {
		e.accept(sh, sh.queues[r.Topic], r)
	}
	e.updatePauses(sh, time.Now())
}
