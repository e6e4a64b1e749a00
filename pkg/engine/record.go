package engine

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/retrytopics"
)

// This file is what an entry keeps of its fetched record, and why it is
// small: 100,000 blocked keys with their parked records live on one
// instance (issue 10: ≤ 1 KB per blocked key and ≤ 400 bytes per parked
// record beyond its key and value; BenchmarkParkingMemory measures it).

// record is what an entry keeps of its fetched kgo.Record: key, value and
// position. Its topic and partition are its queue's.
type record struct {
	Key, Value  []byte
	Offset      int64
	LeaderEpoch int32
}

// originEntry is an entry and its origin in one allocation.
type originEntry struct {
	entry
	o retrytopics.Origin
}

// monoStart is the origin of entry.started: a time.Duration since it takes
// 8 bytes where a time.Time takes 24, and stays monotonic.
var monoStart = time.Now()

// newEntry appends the entry of r, fetched on q, to q. o is its origin; nil
// for a parking op, which is never delivered.
//
// A source record's key, value and headers stay in the fetched batch: it
// is done within a transaction or two. A tier or parking record may wait
// for minutes (a head on its tier, a parked record): they are copied, so
// that it does not pin its whole fetched batch, the batch's kgo.Records and
// their kretry headers (about 1 KB per record).
func (c *core) newEntry(q *queue, r *kgo.Record, o *retrytopics.Origin) *entry {
	var en *entry
	if o == nil {
		en = &entry{}
	} else {
		oe := &originEntry{o: *o}
		en = &oe.entry
		en.origin = &oe.o
	}
	en.q = q
	en.rec = record{Key: r.Key, Value: r.Value, Offset: r.Offset, LeaderEpoch: r.LeaderEpoch}
	switch {
	case o == nil:
		en.rec.Key, en.rec.Value = nil, nil // an op is read at once; its entry only holds its offset
	case q.stage != 0:
		en.rec.Key, en.rec.Value = cloneKeyValue(r.Key, r.Value)
		en.origin.Headers = cloneHeaders(en.origin.Headers)
		if en.origin.Topic == c.plan.Source {
			en.origin.Topic = c.plan.Source // one string, not one per record
		}
	}
	q.entries = append(q.entries, en)
	q.bytes += heldBytes(en)
	return en
}

// cloneKeyValue copies k and v into one allocation; a nil key or value
// (null key, tombstone) stays nil.
func cloneKeyValue(k, v []byte) (key, value []byte) {
	if k == nil && v == nil {
		return nil, nil
	}
	buf := make([]byte, len(k)+len(v))
	n := copy(buf, k)
	copy(buf[n:], v)
	if k != nil {
		key = buf[:n:n]
	}
	if v != nil {
		value = buf[n:]
	}
	return key, value
}

// cloneHeaders copies hs and their values (the keys are strings of their
// own); nil when there are none.
func cloneHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	if len(hs) == 0 {
		return nil
	}
	n := 0
	for _, h := range hs {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	out := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		out[i].Key = h.Key
		if h.Value != nil {
			start := len(buf)
			buf = append(buf, h.Value...)
			out[i].Value = buf[start:len(buf):len(buf)]
		}
	}
	return out
}

// release lets go of what an entry holds once a transaction took it: a
// source entry's lane may still point at it (lane.tail) while its key is
// blocked, and a settled parking entry stays in its queue until every
// record parked before it settles (takeParking); neither may pin its key
// and value, its move records or the record it waited behind.
func (en *entry) release() {
	if en.q.behind != nil {
		delete(en.q.behind, en)
	}
	en.moves, en.after = nil, nil
	en.rec.Key, en.rec.Value = nil, nil
	if en.origin != nil {
		en.origin.Headers = nil
	}
}
