package engine

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/kretry/kretry/retrytopics"
)

// core is the engine's state and the logic that changes it: the shards
// (shard.go), the lanes ready to deliver, the in-flight counts, the moves
// and ops for the next transaction. It takes events and returns effects:
//
//   - records fetched (ingest), a delivery's result (apply), the due
//     times and the loop's turn (dispatch), a transaction committed
//     (committed) or dropped (reset), partitions assigned (assign) and
//     their group commits read (offsetsFetched, offsetsWaitOver);
//   - deliveries to start (the results dispatch and startReady return),
//     partitions to pause or resume (takePauses), the next transaction
//     (prepare), and whether the loop must wake (takeWake).
//
// It has no lock of its own and no Kafka client, and starts no goroutine
// and no timer (it calls Options.Overload, which locks its own state, and
// the Observer):
// Engine, the shell around it, polls, delivers, commits and feeds the
// events back, one at a time under Engine.mu, which is its one owner. So
// a test drives it with records it makes, with no broker (core_test.go,
// counts_test.go).
type core struct {
	opts   Options
	plan   retrytopics.Plan
	log    *slog.Logger
	stats  Stats
	topics *retrytopics.Topics
	obs    Observer
	// hard ends ShutdownGrace after Run's context: a delivery that fails
	// after it was abandoned at shutdown, and is left uncommitted.
	hard context.Context

	shards map[int32]*shard
	gen    uint64
	// due orders the tier queues whose records wait by their next record's
	// due time (takeDue).
	due        retrytopics.Timeline[*queue]
	ready      []*lane // lanes whose next entry is a first attempt
	retryReady []*lane // lanes whose next entry is a retry or parked record
	inflight   int
	retrying   int
	stopping   bool
	lastCommit time.Time
	// commitSoon: a transaction is due before CommitInterval (see settle).
	commitSoon bool
	// barrierDue: newly assigned partitions wait for their barrier; write it
	// at once rather than at the next CommitInterval.
	barrierDue bool
	// fetched are the group's commits as this assignment's OffsetFetch
	// answered them; nil until it answers. The barrier waits for it, at
	// most offsetsFetchWait (fetchWaited; see fetched.go); assignments
	// counts the assignments, for that timer.
	fetched     groupCommits
	fetchWaited bool
	assignments int
	// commits are the group's commits of the assigned partitions as the
	// engine last knew them: the assignment's OffsetFetch, then each
	// transaction it committed. A queue created after a reset starts from
	// them (progress.go); a transaction rewrites those it holds no queue
	// state for (keepCommits).
	commits groupCommits
	// pauseQueue are the queues whose pause changed since takePauses;
	// droppedResume the partitions the client has paused whose shards a
	// reset dropped.
	pauseQueue    []*queue
	droppedResume map[string][]int32
	// loose are op records not tied to a fetched record, written by the
	// next transaction; looseAfter runs once it commits.
	loose      []move
	looseAfter []func()
	// started are the deliveries the last startReady began, for the shell
	// to run (its buffer is reused).
	started []*result
	// woke: something the loop waits for changed (a pause, a reset, a
	// commit due); the shell wakes its poll (takeWake).
	woke bool

	warned      sync.Map
	instanceTag string
}

// wake asks the shell to wake the loop, which may be waiting in a poll.
func (c *core) wake() { c.woke = true }

// takeWake reports whether the loop must wake, and clears it.
func (c *core) takeWake() bool {
	w := c.woke
	c.woke = false
	return w
}

// warnOnce logs msg at warn level the first time key is seen.
func (c *core) warnOnce(key, msg string, args ...any) {
	if _, seen := c.warned.LoadOrStore(key, true); !seen {
		c.log.Warn(msg, args...)
	}
}

func (c *core) parking() bool { return c.opts.Ordering.Parks() }

// reset drops every shard; results of deliveries still in flight are
// discarded when they arrive (their generation is stale).
func (c *core) reset() {
	c.gen++
	for _, sh := range c.shards {
		for _, q := range sh.queues {
			if q.applied { // the client has it paused: resume it (takePauses)
				c.droppedResume = addPartition(c.droppedResume, q)
			}
		}
		if !sh.restoring { // a restoring shard's parked records are counted when it finishes (finishRestore)
			c.stats.ParkedRecords.Add(-int64(sh.parkedCount() + sh.releasedCount()))
		}
		c.stats.BlockedKeys.Add(-int64(sh.blockedCount()))
		c.stats.HeldKeys.Add(-int64(sh.held))
	}
	for _, q := range c.pauseQueue {
		q.pauseQueued = false
	}
	c.pauseQueue = c.pauseQueue[:0]
	c.wake()
	c.shards = map[int32]*shard{}
	c.due = retrytopics.Timeline[*queue]{}
	c.ready, c.retryReady = nil, nil
	c.commitSoon = false
	c.loose, c.looseAfter = nil, nil
}
