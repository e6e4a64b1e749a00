package engine

import (
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
	offsets  map[string]map[int32]kgo.EpochOffset
	after    []func()
	records  int
	barriers []*shard
	// fetched are the group's commits at the assignment (see fetched.go).
	fetched groupCommits
}

// prepare collects the moves and commit offsets of every settled prefix,
// the moves of settled parking entries (see parking.go: they are idempotent
// through their settle ops) and pending barriers. It returns nil when there
// is nothing new.
func (c *core) prepare() *txn {
	c.lastCommit = time.Now()
	c.commitSoon, c.barrierDue = false, false
	tx := &txn{gen: c.gen, offsets: map[string]map[int32]kgo.EpochOffset{}, fetched: c.fetched}
	take := func(en *entry) {
		if en.moved {
			return
		}
		en.moved = true
		tx.moves = append(tx.moves, en.moves...)
		tx.after = append(tx.after, en.after...)
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
			if q.stage == parkStage {
				for _, en := range q.entries {
					if en.settled {
						take(en)
					}
				}
			}
			n := 0
			for n < len(q.entries) && q.entries[n].settled {
				take(q.entries[n])
				n++
			}
			if n > 0 {
				last := q.entries[n-1].rec
				q.commit = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
				clear(q.entries[:n]) // the backing array must not keep them alive
				q.entries = q.entries[n:]
				q.settledHead = 0
				tx.records += n
				advanced = true
			}
			if q.hasCommit {
				if tx.offsets[q.topic] == nil {
					tx.offsets[q.topic] = map[int32]kgo.EpochOffset{}
				}
				tx.offsets[q.topic][sh.p] = q.commit
			}
		}
		// A partition paused because it held MaxPending records resumes
		// now that they left, not at the next dispatch: with every
		// partition paused the loop's poll would wait a whole
		// CommitInterval for a record that cannot come.
		c.updatePauses(sh, c.lastCommit)
	}
	if !advanced && len(tx.moves) == 0 {
		return nil
	}
	return tx
}

// txnDue reports whether the next transaction is due at now:
// CommitInterval after the last, once a partition's settled prefix reached
// MaxPending/2 (commitSoon, see settle), or for a barrier (barrierDue).
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
