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
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// errNotCommitted is returned by committed for a transaction whose marks
// are not readable (read_committed) once it ended: it was aborted.
var errNotCommitted = errors.New("the transaction was aborted although asked to commit")

// commitTries bounds the transactions a batch is written in when they end
// aborted although asked to commit (errNotCommitted).
const commitTries = 3

// commitChecked writes recs in one transaction of tx and checks that
// their marks are readable afterwards (committed), writing them again in
// a new transaction of a new client when they are not, at most
// commitTries times. A transaction that ended aborted left nothing
// behind, so writing the records again moves nothing twice.
func (c *Client) commitChecked(ctx context.Context, tx *producer, recs []*kgo.Record) error {
	var err error
	for try := 1; try <= commitTries; try++ {
		if try > 1 {
			if err := tx.renew(ctx); err != nil {
				return fmt.Errorf("a transaction of %d records: %w; starting the producer again: %w; nothing of it moved: run the same command again", len(recs), errNotCommitted, err)
			}
		}
		if err = tx.commit(ctx, recs); err != nil {
			return err
		}
		if err = tx.committed(ctx, recs); !errors.Is(err, errNotCommitted) {
			return err
		}
		c.log.Warn("dlq: a transaction asked to commit ended aborted; writing its records again", "dlq", c.t.DLQ, "records", len(recs), "try", try)
	}
	return fmt.Errorf("a transaction of %d records: %w, %d times; nothing of it moved: run the same command again", len(recs), err, commitTries)
}

// committed reads back the marks among recs, just written in a
// transaction of p that ended: it returns nil when every one of them is
// readable with read_committed, errNotCommitted when none is, and another
// error when the read does not finish within 10s or finds only some.
func (p *producer) committed(ctx context.Context, recs []*kgo.Record) error {
	topic := MarksTopic(p.c.t.DLQ)
	var offsets []int64
	for _, r := range recs {
		if r.Topic == topic {
			offsets = append(offsets, r.Offset)
		}
	}
	if len(offsets) == 0 {
		return nil
	}
	first, last := slices.Min(offsets), slices.Max(offsets)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	seen, err := p.readCommitted(ctx, topic, first, last)
	const again = "run the same command again to continue (what it moved, if anything, is marked and is not moved twice)"
	switch {
	case err != nil:
		return fmt.Errorf("checking that the transaction of %d records committed: %w; %s", len(recs), err, again)
	case seen == 0:
		return errNotCommitted
	case seen < len(offsets):
		return fmt.Errorf("checking that the transaction of %d records committed: %d of its %d marks are readable; %s", len(recs), seen, len(offsets), again)
	}
	return nil
}

// readCommitted counts the data records of topic's partition 0 at offsets
// first to last that a read_committed reader gets. It reads until a record
// past last, which the transaction's own end marker always is. The reader
// is p's, started at the first transaction's first mark and read on from
// there: the transactions of p follow one another on the partition.
func (p *producer) readCommitted(ctx context.Context, topic string, first, last int64) (int, error) {
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
		if err := fetchErr(fs); err != nil {
			return seen, err
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case r.Offset > last:
				done = true
			case r.Offset >= first && !r.Attrs.IsControl():
				seen++
			}
		})
		if done {
			return seen, nil
		}
	}
}

// fetchErr is the first error of fs.
func fetchErr(fs kgo.Fetches) error {
	var first error
	fs.EachError(func(t string, p int32, err error) {
		if first == nil {
			first = fmt.Errorf("reading %s partition %d: %w", t, p, err)
		}
	})
	return first
}
