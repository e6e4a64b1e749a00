package engine

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/offsetmap"
)

// This file is what a source or tier partition has done past its
// committed offset, and how a transaction commits it out of offset order.
//
// A transaction takes the moves of every settled record, wherever it
// stands in its partition, and commits the offset of the partition's first
// record not done, with commit metadata (package offsetmap) listing the
// records past it still pending. A slow or stuck record then holds back
// only its own offset: the records after it are delivered, moved and let go
// of meanwhile, instead of waiting for it in memory up to MaxPending and
// then pausing the partition (issue 10: other keys with one slow key).
//
// The partition's next owner, or this engine after a reset, starts at the
// committed offset and skips the records the map says are done (skip).
// The map comes from the group's commit: the assignment's OffsetFetch
// (fetched.go) or the engine's own last transaction (core.commits).
//
// The metadata is kept within offsetmap.DefaultBudget (offsetmap.Choose):
// past it, the settled records past the last one that fits stay in
// memory, unmoved, until earlier ones are done (the partition pauses at
// MaxPending entries, as before); a map never ends before the last
// commit's, so what a predecessor committed as done stays done.
//
// One ordering rule rides on it. A parked source record is taken only
// with or after the previous source record of its lane (queue.behind, set
// by park): its park move, written before that record's outcome, would
// otherwise let the parked record be released ahead of it, now or after a
// restart (a spill behind a record in delivery; a record held by the
// overload gate; one too large for the parking topic). The prefix rule
// gave this for free.

// commitPoint is one partition's commit: its offset and its metadata.
type commitPoint struct {
	kgo.EpochOffset
	// Meta is the offsetmap metadata (empty: nothing past Offset is done).
	Meta string
}

// progress is what a source or tier queue knows past its committed offset.
type progress struct {
	// end is the offset after the last record accepted or skipped;
	// endEpoch its leader epoch.
	end      int64
	endEpoch int32
	// inherited is the done map of the commit the queue started from.
	inherited    offsetmap.Map
	hasInherited bool
	// mapEnd is the End of the map of the last commit (or the inherited
	// one): the next never ends before it (offsetmap.Choose).
	mapEnd int64
}

// inherit starts q from the group's commit cp, before any record of it is
// read: the records cp's map lists as done are skipped.
func (c *core) inherit(q *queue, cp commitPoint) {
	if q.hasCommit || cp.Offset < 0 {
		return
	}
	m, err := offsetmap.Decode(cp.Offset, cp.Meta)
	if err != nil {
		c.warnOnce("offsetmap:"+q.topic, "the group's commit metadata cannot be read; every record past the committed offset is delivered again", "topic", q.topic, "partition", q.p, "offset", cp.Offset, "err", err)
	}
	q.inherited, q.hasInherited = m, true
	q.end, q.endEpoch = cp.Offset, cp.Epoch
	q.mapEnd = m.End
}

// skip takes r's offset as read and reports whether the inherited map
// says r is done.
func (q *queue) skip(r *kgo.Record) bool {
	done := q.hasInherited && q.inherited.Done(r.Offset)
	q.end, q.endEpoch = r.Offset+1, r.LeaderEpoch
	return done
}

// takeDone hands the settled entries of q that the next commit marks done
// to take, drops them from q, and returns q's commit point (offsetmap.
// Choose decides, within the metadata budget). It reports false when q has
// nothing to commit (no record read, no commit inherited).
func (c *core) takeDone(q *queue, take func(*entry)) (commitPoint, bool) {
	if !q.hasCommit && !q.hasInherited {
		return commitPoint{}, false
	}
	end := q.end
	spans := make([]offsetmap.Span, 0, len(q.entries)+1)
	for _, en := range q.entries {
		// A spilled record may go with the record it waits behind, which
		// is earlier in q: its doneNow is this pass's.
		en.doneNow = en.settled
		if b, ok := q.behind[en]; ok && en.doneNow {
			en.doneNow = b.moved || b.doneNow
		}
		o := en.rec.Offset
		spans = append(spans, offsetmap.Span{From: o, To: o + 1, Done: en.doneNow})
	}
	if q.hasInherited {
		end = max(end, q.inherited.End)
		for _, r := range q.inherited.Pending { // not read yet
			if r.To > q.end {
				spans = append(spans, offsetmap.Span{From: max(r.From, q.end), To: r.To})
			}
		}
	}
	ch := offsetmap.Choose(spans, end, q.mapEnd, c.opts.commitMetaBudget)
	q.mapEnd = ch.End
	kept := q.entries[:0]
	for i, en := range q.entries {
		if ch.Take[i] {
			q.bytes -= heldBytes(en) // before take releases its key and value
			take(en)
			continue
		}
		kept = append(kept, en)
	}
	clear(q.entries[len(kept):]) // the backing array must not keep them alive
	q.entries = kept
	cp := commitPoint{EpochOffset: kgo.EpochOffset{Offset: ch.Committed, Epoch: -1}, Meta: ch.Metadata}
	switch {
	case len(q.entries) > 0 && q.entries[0].rec.Offset == cp.Offset:
		cp.Epoch = q.entries[0].rec.LeaderEpoch
	case cp.Offset == q.end:
		cp.Epoch = q.endEpoch
	}
	return cp, true
}
