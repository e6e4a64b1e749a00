package engine

import "time"

// This file decides which partitions are paused (updatePauses and
// wantPaused, the core's, under e.mu like all of the core) and tells the
// client (applyPauses, the shell's: from the loop only, never under e.mu).

// updatePauses decides which of sh's partitions pause: a restoring shard's
// tiers, and its source once MaxPending of its records wait in the
// backlog; a source with MaxPending records held, or MaxParked records
// parked, or parked records of its share of pendingBytes read back; a tier
// whose next record is not due within tierLead or that holds MaxPending
// records. It only marks them: the loop tells the client (applyPauses),
// never under e.mu.
//
// The parking partition itself never pauses: the records that release a
// blocked key may be behind those it holds. Its parked records are bounded
// by pausing the source that parks them.
//
// A restoring source keeps fetching into the backlog: paused, it would be
// left out of the fetch the client sends as the barrier is read, and on
// Kafka the first delivery after an assignment would wait that fetch's
// FetchMaxWait out (issue 10).
func (c *core) updatePauses(sh *shard, now time.Time) {
	full := func(q *queue) bool { return c.full(len(q.entries), q.bytes, q.paused) }
	if sh.parkedCount() == 0 {
		// Nothing parked or on its way: a parkingBytes that drifted (a
		// record another writer parked, read back in place of one of
		// ours) must not keep the source paused.
		sh.parkingBytes = 0
	}
	// A restoring shard holds its backlog and the parked records replayed
	// so far, and its backlog's records of blocked keys park as it
	// finishes: counted apart, a source whose fetch answered first took a
	// whole share of backlog beside a share of parked records, and parked
	// 2.1 times the share (a breaker run).
	restoreFull := sh.restoring && c.full(len(sh.backlog), sh.backlogBytes+parkedBytes(sh), false)
	// The park bound resumes at half on its own pause, not on one the
	// restore or the source queue's bound made: read off sh.src.paused, a
	// restore's pause held the source with half a share parked until the
	// blocked key unblocked (a breaker run: 29.1s on Kafka).
	sh.parkFull = sh.park != nil && (sh.parkedCount() >= c.opts.MaxParked || c.parkedFull(sh, sh.parkFull))
	c.wantPaused(sh.src, restoreFull || full(sh.src) || sh.parkFull ||
		c.gatePaused(now, false)) // overload gate
	for _, q := range sh.tiers {
		c.wantPaused(q, sh.restoring || q.due.Waiting(now.Add(c.tierLead())) || full(q) || c.gatePaused(now, true)) // overload gate
	}
}

// pendingBudget and pendingBytes bound what the assigned partitions
// share when Options.MaxPending is left to its default: 65,536 records, and
// 64 MiB of keys, values and entries (an entry is ~entryBytes beyond them),
// what an instance with 16 partitions of 1 KiB records held before; each
// partition may hold at least MaxPending records (4,096) or floorBytes,
// whichever it reaches first (one record at least, however large). A
// partition that pauses because it holds MaxPending records has what
// franz-go buffered for it dropped and fetched again (and waits a
// FetchMaxWait for it): with 4,096 records per partition a 100,000-record
// backlog on 4 partitions was fetched 3.4–3.7 times on Kafka and drained at
// a third of the rate without pauses (docs/PERFORMANCE.md, "6 December,
// later"). Shared, the bound of an instance with few partitions rises; an
// instance holds at most the larger of pendingBytes and floorBytes per
// partition and stage, plus what one fetch brings past it (the pause is
// decided after a poll is taken in).
//
// The bytes are each partition's own (queue.bytes), not a mean over the
// instance: with one mean, a busy partition of tiny records let a stuck
// partition of 20 KiB records hold 32,768 of them (640 MiB). And the floor
// is in bytes too: 4,096 records of 100 KiB are 400 MiB per partition. A
// floor of 2 × MaxInFlight records, tried first, let records of 5 MiB
// hold 640 MiB per partition (a breaker run): records of megabytes now
// flow a few at a time per partition instead.
const (
	pendingBudget = 1 << 16
	pendingBytes  = 64 << 20
	floorBytes    = 16 << 20
	entryBytes    = 256
)

// full reports whether a partition holding n records of the given bytes
// (queue.bytes) holds what it may, and pauses: MaxPending records when it
// was set; left to its default, its share of pendingBudget records (at
// least MaxPending) or of pendingBytes (at least floorBytes), whichever it
// reaches first. A paused one (paused) resumes at half of each
// (hysteresis).
func (c *core) full(n, bytes int, paused bool) bool {
	div := 1
	if paused {
		div = 2
	}
	if !c.opts.sharedPending {
		return n >= c.opts.MaxPending/div
	}
	return n >= c.recordBound()/div || n > 0 && bytes >= c.byteBound()/div
}

// parkedFull reports whether sh's parked records reach the partition's
// share of pendingBytes, MaxPending or not: those its parking queue holds
// (their keys and values; what a settled one held is let go of as a
// transaction takes it, see takeParking) and those on their way through
// the parking topic (sh.parkingBytes). Counting only those read back let
// a key blocked under steady traffic park 2–4.5 times the share while its
// moves went round (a breaker run). paused: this bound holds the source
// paused now (shard.parkFull), which then resumes at half.
func (c *core) parkedFull(sh *shard, paused bool) bool {
	div := 1
	if paused {
		div = 2
	}
	return parkedBytes(sh) >= c.byteBound()/div
}

// parkedBytes is the keys and values of sh's parked records: those its
// parking queue holds and those on their way (sh.parkingBytes).
func parkedBytes(sh *shard) int {
	if sh.park == nil {
		return 0
	}
	return sh.park.bytes - len(sh.park.entries)*entryBytes + sh.parkingBytes
}

// byteBound is the bytes a partition may hold: its share of pendingBytes,
// at least floorBytes.
func (c *core) byteBound() int { return max(floorBytes, pendingBytes/max(1, len(c.shards))) }

// recordBound is the records a partition may hold at most: MaxPending,
// or, left to its default, its share of pendingBudget when larger.
func (c *core) recordBound() int {
	if !c.opts.sharedPending {
		return c.opts.MaxPending
	}
	return max(c.opts.MaxPending, pendingBudget/max(1, len(c.shards)))
}

// heldBytes is what en counts for in its queue's bytes: its key and value
// and entryBytes.
func heldBytes(en *entry) int { return len(en.rec.Key) + len(en.rec.Value) + entryBytes }

// wantPaused marks q to be paused or resumed, queues it for applyPauses
// and wakes the loop, which may be waiting in a poll.
func (c *core) wantPaused(q *queue, want bool) {
	if q.paused == want {
		return
	}
	q.paused = want
	if !q.pauseQueued {
		q.pauseQueued = true
		c.pauseQueue = append(c.pauseQueue, q)
		c.wake()
	}
}

// applyPauses tells the client the pauses and resumes decided since the
// last call (takePauses). Only the loop calls it, outside e.mu: one
// caller keeps the calls in the order decided, and no Kafka client call is
// made under the engine's lock.
func (e *Engine) applyPauses() {
	e.mu.Lock()
	pause, resume, dropped := e.takePauses()
	e.unlock()
	cl := e.sess.Client()
	if dropped != nil {
		cl.ResumeFetchPartitions(dropped)
	}
	if pause != nil {
		cl.PauseFetchPartitions(pause)
	}
	if resume != nil {
		cl.ResumeFetchPartitions(resume)
	}
}

// takePauses returns the partitions to pause and resume since the last
// call: the resumes of partitions whose shards a reset dropped (dropped,
// told first), then each queued queue's change.
func (c *core) takePauses() (pause, resume, dropped map[string][]int32) {
	for _, q := range c.pauseQueue {
		q.pauseQueued = false
		if q.paused == q.applied {
			continue
		}
		q.applied = q.paused
		if q.paused {
			pause = addPartition(pause, q)
		} else {
			resume = addPartition(resume, q)
		}
	}
	c.pauseQueue = c.pauseQueue[:0]
	dropped = c.droppedResume
	c.droppedResume = nil
	return pause, resume, dropped
}

func addPartition(m map[string][]int32, q *queue) map[string][]int32 {
	if m == nil {
		m = map[string][]int32{}
	}
	m[q.topic] = append(m[q.topic], q.p)
	return m
}
