package lag

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The record fetch behind the ages reads, for every lagging partition, the
// first record at or after the offset a group will consume next. It sends
// raw Fetch requests, one per partition leader and isolation level per
// round, each carrying every partition that broker leads, and decodes them
// with kgo.ProcessFetchPartition (decompression, control records, aborted
// transactions). A request holds each partition once, so several groups at
// different offsets of one partition need more rounds; one round usually
// answers them all, since a fetch returns whole batches. Results are
// cached per (topic ID, partition, offset): a record's timestamp never
// changes, so a commit that did not move costs no fetch at the next scan.
const (
	// fetchMaxBytes bounds one response: the memory of a round per
	// broker.
	fetchMaxBytes = 16 << 20
	// fetchPartitionMaxBytes is Kafka's default max.partition.fetch.bytes:
	// a batch up to this size always fits, larger ones only when first in
	// a response (Kafka's rule, KIP-74).
	fetchPartitionMaxBytes = 1 << 20
	// fetchMaxRounds bounds the rounds of one scan.
	fetchMaxRounds = 8
)

// fetchKey is one offset of one partition, read at one isolation level.
type fetchKey struct {
	id        [16]byte
	topic     string
	partition int32
	from      int64
	committed bool // read_committed
}

// fetchResult is what a fetch learnt about a fetchKey: the first record to
// consume (found), or that none exists before emptyUntil.
type fetchResult struct {
	found      bool
	at         int64
	ts         time.Time
	emptyUntil int64
}

// fetchWant asks for one fetchKey of a partition whose lag ends at end.
type fetchWant struct {
	key    fetchKey
	end    int64
	leader int32
}

// pending is one fetchWant under way.
type pending struct {
	want   fetchWant
	cursor int64 // where to fetch next; no record to consume before it
	done   bool
	res    fetchResult
}

type partKey struct {
	topic     string
	partition int32
	committed bool
}

// fetcher holds the cache between scans.
type fetcher struct {
	cl    *kgo.Client
	decom kgo.Decompressor
	cache map[fetchKey]fetchResult
}

func newFetcher(cl *kgo.Client) *fetcher {
	return &fetcher{cl: cl, decom: kgo.DefaultDecompressor(), cache: map[fetchKey]fetchResult{}}
}

// fetchStats counts a run of fetch, for the logs and the benchmark.
type fetchStats struct {
	Wanted, Cached, Requests, Rounds, Unresolved int
}

// fetch resolves wants within ctx; wants it could not resolve are missing
// from the result. The cache keeps exactly the keys of this call.
func (f *fetcher) fetch(ctx context.Context, wants []fetchWant) (map[fetchKey]fetchResult, fetchStats) {
	run := f.start(wants)
	for round := 0; round < fetchMaxRounds && len(run.byPart) > 0 && ctx.Err() == nil; round++ {
		run.st.Rounds++
		reqs, offsets := run.requests()
		for a := range f.send(ctx, reqs, &run.st) {
			run.apply(f, a, offsets)
		}
		run.prune()
	}
	f.cache = run.learnt()
	return run.out, run.st
}

// fetchRun is one call of fetch: the resolved wants (out) and those under
// way, by partition, each partition's sorted by cursor.
type fetchRun struct {
	st     fetchStats
	out    map[fetchKey]fetchResult
	byPart map[partKey][]*pending
	names  map[[16]byte]string // topic by topic ID
}

// start resolves the wants the cache answers and queues the others.
func (f *fetcher) start(wants []fetchWant) *fetchRun {
	run := &fetchRun{out: make(map[fetchKey]fetchResult, len(wants)), byPart: map[partKey][]*pending{}, names: map[[16]byte]string{}}
	for _, w := range wants {
		if _, dup := run.out[w.key]; dup {
			continue
		}
		run.st.Wanted++
		p := &pending{want: w, cursor: w.key.from}
		if c, ok := f.cache[w.key]; ok {
			switch {
			case c.found, c.emptyUntil >= w.end:
				run.out[w.key] = c
				run.st.Cached++
				continue
			case c.emptyUntil > p.cursor:
				p.cursor = c.emptyUntil
			}
		}
		if p.cursor >= w.end {
			p.done, p.res = true, fetchResult{emptyUntil: p.cursor}
			run.out[w.key] = p.res
			continue
		}
		pk := partKey{w.key.topic, w.key.partition, w.key.committed}
		run.byPart[pk] = append(run.byPart[pk], p)
		run.names[w.key.id] = w.key.topic
	}
	for _, ps := range run.byPart {
		slices.SortFunc(ps, func(a, b *pending) int { return cmp.Compare(a.cursor, b.cursor) })
	}
	return run
}

// reqKey is one Fetch request of a round: a leader and an isolation level.
type reqKey struct {
	leader    int32
	committed bool
}

// requests builds this round's Fetch requests: each partition once, at the
// cursor of its first pending want; offsets holds those fetch offsets.
func (run *fetchRun) requests() (map[reqKey]*kmsg.FetchRequest, map[partKey]int64) {
	type topicKey struct {
		reqKey
		topic string
	}
	reqs := map[reqKey]*kmsg.FetchRequest{}
	topicIdx := map[topicKey]int{}
	offsets := map[partKey]int64{}
	for pk, ps := range run.byPart {
		first := ps[0]
		rk := reqKey{first.want.leader, pk.committed}
		req := reqs[rk]
		if req == nil {
			req = newFetchRequest(pk.committed)
			reqs[rk] = req
		}
		tk := topicKey{rk, pk.topic}
		ti, ok := topicIdx[tk]
		if !ok {
			t := kmsg.NewFetchRequestTopic()
			t.Topic, t.TopicID = pk.topic, first.want.key.id
			ti = len(req.Topics)
			topicIdx[tk] = ti
			req.Topics = append(req.Topics, t)
		}
		rt := &req.Topics[ti]
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = pk.partition
		rp.FetchOffset = first.cursor
		rp.PartitionMaxBytes = fetchPartitionMaxBytes
		rp.CurrentLeaderEpoch = -1
		rp.LogStartOffset = -1
		rt.Partitions = append(rt.Partitions, rp)
		offsets[pk] = first.cursor
	}
	return reqs, offsets
}

// newFetchRequest is a sessionless Fetch that does not wait for data.
func newFetchRequest(committed bool) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 1
	req.MaxBytes = fetchMaxBytes
	req.SessionID = 0
	req.SessionEpoch = -1
	if committed {
		req.IsolationLevel = 1
	}
	return req
}

// fetchAnswer is one Fetch response of a round.
type fetchAnswer struct {
	committed bool
	resp      *kmsg.FetchResponse
}

// send sends reqs at once and returns their answers (failed requests have
// none) once all have ended.
func (f *fetcher) send(ctx context.Context, reqs map[reqKey]*kmsg.FetchRequest, st *fetchStats) chan fetchAnswer {
	answers := make(chan fetchAnswer, len(reqs))
	var wg sync.WaitGroup
	for rk, req := range reqs {
		st.Requests++
		wg.Go(func() {
			resp, err := req.RequestWith(ctx, f.cl.Broker(int(rk.leader)))
			if err == nil {
				answers <- fetchAnswer{rk.committed, resp}
			}
		})
	}
	wg.Wait()
	close(answers)
	return answers
}

// apply reads answer a, whose partitions were fetched from offsets.
func (run *fetchRun) apply(f *fetcher, a fetchAnswer, offsets map[partKey]int64) {
	if kerr.ErrorForCode(a.resp.ErrorCode) != nil {
		return
	}
	for i := range a.resp.Topics {
		rt := &a.resp.Topics[i]
		topic := rt.Topic
		if topic == "" {
			topic = run.names[rt.TopicID] // v13+ answers with topic IDs only
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			pk := partKey{topic, rp.Partition, a.committed}
			if ps, ok := run.byPart[pk]; ok {
				f.apply(ps, offsets[pk], rp, a.committed)
			}
		}
	}
}

// prune moves the wants resolved this round to out.
func (run *fetchRun) prune() {
	for pk, ps := range run.byPart {
		rest := ps[:0]
		for _, p := range ps {
			if p.done {
				run.out[p.want.key] = p.res
			} else {
				rest = append(rest, p)
			}
		}
		if len(rest) == 0 {
			delete(run.byPart, pk)
			continue
		}
		slices.SortFunc(rest, func(a, b *pending) int { return cmp.Compare(a.cursor, b.cursor) })
		run.byPart[pk] = rest
	}
}

// learnt is the next cache: the resolved wants, and how far the others
// were read (it still saves the next scan some reading); it counts the
// unresolved.
func (run *fetchRun) learnt() map[fetchKey]fetchResult {
	next := make(map[fetchKey]fetchResult, len(run.out)+len(run.byPart))
	maps.Copy(next, run.out)
	for _, ps := range run.byPart {
		run.st.Unresolved += len(ps)
		for _, p := range ps {
			if p.cursor > p.want.key.from {
				next[p.want.key] = fetchResult{emptyUntil: p.cursor}
			}
		}
	}
	return next
}

// apply reads one partition's answer, fetched from offset, into its
// pendings (sorted by cursor, the first at offset).
func (f *fetcher) apply(ps []*pending, offset int64, rp *kmsg.FetchResponseTopicPartition, committed bool) {
	if rp.ErrorCode != 0 {
		// OFFSET_OUT_OF_RANGE (retention moved the log start since the
		// listing), a leader change: unresolved in this scan.
		return
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	fp, next := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
		IsolationLevel: iso,
		Offset:         offset,
		Topic:          ps[0].want.key.topic,
		Partition:      rp.Partition,
	}, rp, f.decom, nil)
	recs := fp.Records // data records only: control records are dropped, aborted ones too when committed
	for _, p := range ps {
		if p.cursor >= next {
			break // this answer did not reach it
		}
		i, _ := slices.BinarySearchFunc(recs, p.cursor, func(r *kgo.Record, o int64) int { return cmp.Compare(r.Offset, o) })
		if i < len(recs) && recs[i].Offset < p.want.end {
			p.done, p.res = true, fetchResult{found: true, at: recs[i].Offset, ts: recs[i].Timestamp}
			continue
		}
		p.cursor = next
		if next >= p.want.end {
			p.done, p.res = true, fetchResult{emptyUntil: next}
		}
	}
}
