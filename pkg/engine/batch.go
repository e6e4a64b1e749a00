package engine

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// This file is what the next transaction carries (prepare) and the
// bookkeeping once it committed (committed): the core's side of txn.go.

// txn is what one transaction carries.
type txn struct {
	gen      uint64
	moves    []move
	offsets  groupCommits
	after    []func()
	records  int
	barriers []*shard
	// fetched are the group's commits at the assignment (see fetched.go).
	fetched groupCommits
}

// prepare collects the moves of every settled entry that may go (see
// progress.go), the moves of settled parking entries (see parking.go: they
// are idempotent through their settle ops), pending barriers, and the
// commit of every partition the engine knows. It returns nil when there is
// nothing new.
func (c *core) prepare() *txn {
	c.lastCommit = time.Now()
	c.commitSoon, c.barrierDue = false, false
	tx := &txn{gen: c.gen, offsets: groupCommits{}, fetched: c.fetched}
	take := func(en *entry) {
		if en.moved {
			return
		}
		en.moved = true
		tx.moves = append(tx.moves, en.moves...)
		tx.after = append(tx.after, en.after...)
		if en.q.stage == 0 {
			c.untail(en)
			en.release()
		}
	}
	advanced := false
	tx.moves = append(tx.moves, c.loose...)
	tx.after = append(tx.after, c.looseAfter...)
	c.loose, c.looseAfter = nil, nil
	for _, sh := range c.shards {
		if sh.barrierPending && (c.fetched != nil || c.fetchWaited) { // see fetched.go
			tx.moves = append(tx.moves, move{rec: c.barrierRecord(sh)})
			tx.barriers = append(tx.barriers, sh)
		}
		for _, q := range sh.order {
			var cp commitPoint
			var ok bool
			n := len(q.entries)
			if q.stage == parkStage {
				cp, ok = c.takeParking(q, take)
			} else {
				cp, ok = c.takeDone(q, take)
				q.fresh = 0
			}
			tx.records += n - len(q.entries)
			if !ok {
				continue
			}
			if cp != q.commit {
				advanced = true
			}
			q.commit = cp
			tx.offsets.set(q.topic, sh.p, cp)
		}
		// A partition paused because it held MaxPending records resumes
		// now that they left, not at the next dispatch: with every
		// partition paused the loop's poll would wait a whole
		// CommitInterval for a record that cannot come.
		c.updatePauses(sh, c.lastCommit)
	}
	c.keepCommits(tx)
	if !advanced && len(tx.moves) == 0 {
		return nil
	}
	dueOrder(tx.moves)
	return tx
}

// dueOrder puts the retry moves of one transaction in due order, each in
// a slot a retry move held, and leaves every other move where it is. A
// tier partition hands out its records in offset order, each once it is
// due (retrytopics.Schedule): written in the order their queues were
// walked, a retry that failed early sat behind one that failed up to a
// CommitInterval later, and was late by as much (issue 10). The moves of
// one transaction become visible together, so no order across partitions
// is lost; within a tier partition the order is the due order, which is
// what its readers keep. Two retries of one key are never in one
// transaction under key or partition ordering (the key waits on the
// first); under ordering none there is no order to keep.
func dueOrder(moves []move) {
	var slots []int
	for i, m := range moves {
		if m.ev.Kind == flow.MoveRetry {
			slots = append(slots, i)
		}
	}
	if len(slots) < 2 {
		return
	}
	retries := make([]move, len(slots))
	for j, i := range slots {
		retries[j] = moves[i]
	}
	slices.SortStableFunc(retries, func(a, b move) int { return a.due.Compare(b.due) })
	for j, i := range slots {
		moves[i] = retries[j]
	}
}

// takeParking hands the settled entries of parking queue q to take and
// returns its commit point: past its settled prefix.
func (c *core) takeParking(q *queue, take func(*entry)) (commitPoint, bool) {
	for _, en := range q.entries {
		if en.settled {
			take(en)
			// Its moves are taken: it lets go of what it holds (release),
			// which a record parked before it and not yet settled would
			// otherwise keep in memory for as long as its key is blocked.
			// Its moves too: a settle op's key, and a retry's key and
			// value, point into the buffer of its key and value
			// (cloneKeyValue), and kept all of it alive (a breaker run:
			// +225 MiB live with 1,500 parked records of 100 KiB).
			q.bytes -= len(en.rec.Key) + len(en.rec.Value)
			en.release()
		}
	}
	n := 0
	for n < len(q.entries) && q.entries[n].settled {
		n++
	}
	cp := q.commit
	if n > 0 {
		last := q.entries[n-1].rec
		cp = commitPoint{EpochOffset: kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}}
		for _, en := range q.entries[:n] {
			q.bytes -= heldBytes(en)
		}
		clear(q.entries[:n]) // the backing array must not keep them alive
		q.entries = q.entries[n:]
	}
	return cp, q.hasCommit
}

// keepCommits adds to tx the group's commit, as the engine last knew it,
// of every partition of the assignment it holds no queue state for (after
// a reset, until its records are read again): a transaction rewrites the
// commit of every partition, its metadata with it, and one the session
// lists with no metadata would lose the records its map says are done.
func (c *core) keepCommits(tx *txn) {
	for topic, ps := range c.commits {
		for p, cp := range ps {
			if _, ok := tx.offsets[topic][p]; !ok && cp.Offset >= 0 {
				tx.offsets.set(topic, p, cp)
			}
		}
	}
}

// txnDue reports whether the next transaction is due at now:
// CommitInterval after the last, once MaxPending/2 records of a partition
// settled (commitSoon, see settle), or for a barrier (barrierDue).
func (c *core) txnDue(now time.Time) bool {
	return now.Sub(c.lastCommit) >= c.opts.CommitInterval || c.commitSoon || c.barrierDue
}

// committed runs what waits for tx's commit: the after-commit functions,
// the barriers' bookkeeping, the counters and the observer's Moved events.
func (c *core) committed(tx *txn) {
	if tx.gen != c.gen {
		return
	}
	for _, f := range tx.after {
		f()
	}
	for topic, ps := range tx.offsets {
		for p, cp := range ps {
			c.commits.set(topic, p, cp)
		}
	}
	for _, sh := range tx.barriers {
		sh.barrierPending = false
	}
	for _, m := range tx.moves {
		switch m.ev.Kind {
		case flow.MoveRetry:
			if i := c.plan.Stage(m.ev.To); i > 0 {
				c.stats.Retried[i-1].Add(1)
			}
		case flow.MoveDeadLetter:
			if m.ev.Class == string(delivery.ClassExhausted) {
				c.stats.Exhausted.Add(1)
			} else {
				c.stats.Permanent.Add(1)
			}
		case flow.MovePark:
			c.stats.Parked.Add(1)
		default:
			continue
		}
		c.obs.Moved(m.ev)
	}
}
