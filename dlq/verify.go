package dlq

// Checking that a transaction asked to commit did commit: franz-go
// v1.22.3's EndTransaction(TryCommit) can end it with an abort and return
// nil. It does so when it finds no partition marked as added to the
// transaction although records were produced ("no produce succeeded in
// this transaction but produces were attempted; issuing an abort"), and a
// fresh client's first transaction, its one record acknowledged, was seen
// to take that path under load: 3 discards of about 1,000 in
// TestDLQCommands, with the race detector and four busy loops beside it,
// reported "discarded 1" while the broker held the mark behind an abort
// marker. Without this check the operator is told records moved that did
// not; nothing is lost (they stay waiting), but a redrive reported done
// is not.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/topicread"
)

// errNotCommitted is returned by committed for a transaction whose marks
// are not readable (read_committed) once it ended: it was aborted.
var errNotCommitted = errors.New("the transaction was aborted although asked to commit")

// commitTries bounds the transactions a batch is written in when they end
// aborted although asked to commit (errNotCommitted).
const commitTries = 3

// commitChecked writes recs in one transaction of p and checks that
// their marks are readable afterwards (committed), writing them again in
// a new transaction of a new client when they are not, at most
// commitTries times. A transaction that ended aborted left nothing
// behind, so writing the records again moves nothing twice.
func (p *producer) commitChecked(ctx context.Context, recs []*kgo.Record) error {
	var err error
	for try := 1; try <= commitTries; try++ {
		if try > 1 {
			if err := p.renew(ctx); err != nil {
				return fmt.Errorf("%s: %w; starting the producer again: %w; nothing of it moved: run the same command again", p.txnOf(recs), errNotCommitted, err)
			}
		}
		if err = p.commit(ctx, recs); err != nil {
			return err
		}
		if err = p.committed(ctx, recs); !errors.Is(err, errNotCommitted) {
			return err
		}
		p.c.log.Warn("dlq: a transaction asked to commit ended aborted; writing its records again", "dlq", p.c.t.DLQ, "records", len(recs), "try", try)
	}
	return fmt.Errorf("%s: %w, %d times; nothing of it moved: run the same command again", p.txnOf(recs), err, commitTries)
}

// committed reads back the marks among recs, just written in a
// transaction of p that ended: it returns nil when every one of them is
// readable with read_committed, errNotCommitted when none is, and an
// error when only some are. A read that does not finish within 10s (the
// marks topic's last stable offset held back: a broker frozen after the
// commit, another producer's open transaction) is logged, the transaction
// counted as committed, as its client said, and p checks no more: waiting
// 10s on every transaction would not make the answer come.
func (p *producer) committed(ctx context.Context, recs []*kgo.Record) error {
	topic := MarksTopic(p.c.t.DLQ)
	ours := map[int64]bool{}
	first, last := int64(math.MaxInt64), int64(-1)
	for _, r := range recs {
		if r.Topic == topic {
			ours[r.Offset] = true
			first, last = min(first, r.Offset), max(last, r.Offset)
		}
	}
	if len(ours) == 0 || p.unchecked {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	seen, err := p.readCommitted(ctx, topic, ours, first, last)
	switch {
	case err != nil:
		p.unchecked = true
		p.c.log.Warn("dlq: cannot check that the transaction committed; counted as committed, as the Kafka client said, and the rest of this operation is not checked",
			"dlq", p.c.t.DLQ, "records", len(recs), "err", err)
		return nil
	case seen == 0:
		return errNotCommitted
	case seen < len(ours):
		return fmt.Errorf("checking that %s committed: %d of its %d marks are readable; "+
			"run the same command again to continue (what it moved, if anything, is marked and is not moved twice)", p.txnOf(recs), seen, len(ours))
	}
	return nil
}

// readCommitted counts the records of topic's partition 0 at the offsets
// in ours (first to last) that a read_committed reader gets: only those,
// since other writers' records (lease renewals, anything) can lie between
// them. It reads until a record past last, which the transaction's own end
// marker always is. The reader is p's, started at the first transaction's
// first mark and read on from there: the transactions of p follow one
// another on the partition.
func (p *producer) readCommitted(ctx context.Context, topic string, ours map[int64]bool, first, last int64) (int, error) {
	if p.rd == nil {
		rd, err := kgo.NewClient(append(slices.Clone(p.c.opts),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().At(first)}}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(50*time.Millisecond))...)
		if err != nil {
			return 0, err
		}
		p.rd = rd
	}
	seen := 0
	for {
		fs := p.rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return seen, fmt.Errorf("reading %s from offset %d: %w", topic, first, err)
		}
		if err := topicread.FetchErr(topic, fs); err != nil {
			return seen, err
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case r.Offset > last:
				done = true
			case ours[r.Offset] && !r.Attrs.IsControl():
				seen++
			}
		})
		if done {
			return seen, nil
		}
	}
}
