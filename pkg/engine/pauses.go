package engine

import "time"

// This file decides which partitions are paused (updatePauses and
// wantPaused, the core's, under e.mu like all of the core) and tells the
// client (applyPauses, the shell's: from the loop only, never under e.mu).

// updatePauses decides which of sh's partitions pause: a restoring shard's
// tiers, and its source once MaxPending of its records wait in the
// backlog; a source with MaxPending records held or MaxParked records
// parked; a tier whose next record is not due within tierLead or that
// holds MaxPending records. It only marks them: the loop tells the client (applyPauses),
// never under e.mu.
//
// A restoring source keeps fetching into the backlog: paused, it would be
// left out of the fetch the client sends as the barrier is read, and on
// Kafka the first delivery after an assignment would wait that fetch's
// FetchMaxWait out (issue 10).
func (c *core) updatePauses(sh *shard, now time.Time) {
	bound := c.maxPending()
	full := func(q *queue) bool {
		if q.paused {
			return len(q.entries) >= bound/2 // hysteresis
		}
		return len(q.entries) >= bound
	}
	restoreFull := sh.restoring && len(sh.backlog) >= bound
	c.wantPaused(sh.src, restoreFull || full(sh.src) || (c.parking() && sh.parkedCount() >= c.opts.MaxParked) ||
		c.gatePaused(now, false)) // overload gate
	for _, q := range sh.tiers {
		c.wantPaused(q, sh.restoring || q.due.Waiting(now.Add(c.tierLead())) || full(q) || c.gatePaused(now, true)) // overload gate
	}
}

// pendingBudget and pendingBytes bound what the assigned partitions
// share when Options.MaxPending is left to its default: 65,536 records, and
// 64 MiB of keys, values and entries (an entry is ~entryBytes beyond them),
// what an instance with 16 partitions of 1 KiB records held before. A
// partition that pauses because it holds MaxPending records has what
// franz-go buffered for it dropped and fetched again (and waits a
// FetchMaxWait for it): with 4,096 records per partition a 100,000-record
// backlog on 4 partitions was fetched 3.4–3.7 times on Kafka and drained at
// a third of the rate without pauses (docs/PERFORMANCE.md, "6 December,
// later"). Shared, the bound of an instance with few partitions rises,
// but never past these unless the 4,096-record floor does.
const (
	pendingBudget = 1 << 16
	pendingBytes  = 64 << 20
	entryBytes    = 256
)

// maxPending is the records a partition may hold (Options.MaxPending):
// when left to its default, its share of the budgets if that is larger.
func (c *core) maxPending() int {
	n := len(c.shards)
	if !c.opts.sharedPending || n == 0 {
		return c.opts.MaxPending
	}
	records := min(pendingBudget, pendingBytes/(c.recordBytes.mean()+entryBytes))
	return max(c.opts.MaxPending, records/n)
}

// meanSize is a running mean of record sizes, weighted to the last ~64.
type meanSize struct{ v float64 }

func (m *meanSize) observe(n int) {
	if m.v == 0 {
		m.v = float64(n)
		return
	}
	m.v += (float64(n) - m.v) / 64
}

func (m *meanSize) mean() int { return int(m.v) }

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
