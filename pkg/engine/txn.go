package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file runs a transaction (commit): Begin, the moves, the offset
// commit of every settled prefix, End (DESIGN.md invariant 2). What one
// carries, and the bookkeeping once it committed, are the core's
// (batch.go).

// transactionTimeout is the producer's transaction timeout and the bound on
// one commit: a transaction open longer is aborted by its coordinator
// anyway, so waiting longer for End (which waits for a heartbeat the group
// may not be running while it rejoins after a broker failure) only stalls
// every partition.
const transactionTimeout = 15 * time.Second

// shutdownCommitTimeout bounds the final commit at shutdown: seen on Kafka
// after a broker outage, End waited for a heartbeat that never came and a
// SIGTERM took a minute. Past it the transaction aborts and the next owner
// delivers its records again.
const shutdownCommitTimeout = 10 * time.Second

// markersSettle is how long after an End the coordinator may still be
// writing its markers (milliseconds on a healthy cluster): a transaction
// that begins sooner waits for them first (awaitPreviousEnd), one that
// begins later does not ask.
const markersSettle = time.Second

// commit runs tx as one transaction, bounded by timeout. A transaction that
// does not commit drops all state (after in-flight deliveries end): the
// records after the last commit are read and delivered again. Only a fatal
// producer error is returned.
func (e *Engine) commit(tx *txn, timeout time.Duration) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := e.sess.Begin(); err != nil {
		// Only a transaction still open after a failed End gets here: the
		// producer is in a state the engine cannot use; a new session can.
		return fmt.Errorf("%w: the transactional producer %q cannot begin a transaction after the last one failed to end (%v): %w",
			errSessionReset, e.opts.TransactionalID, e.lastEndErr, err)
	}
	if time.Since(e.lastEnd) < markersSettle {
		e.awaitPreviousEnd(ctx)
	}
	perr := e.produceMoves(ctx, tx)
	try := kgo.TryCommit
	if perr != nil {
		e.log.Error("a move failed; aborting the transaction, its records will be delivered again", "err", perr)
		try = kgo.TryAbort
	}
	if e.opts.beforeEnd != nil {
		e.opts.beforeEnd()
	}
	var unknown []string
	fctx := kgo.PreTxnCommitFnContext(ctx, offsetsHook(tx, e.sess.Client().CommittedOffsets(), &unknown))
	committed, err := e.sess.End(fctx, try)
	e.lastEndErr, e.lastEnd = err, time.Now()
	if fencedErr := errors.Join(err, perr); isFenced(fencedErr) {
		e.stats.Aborted.Add(1)
		return e.fencedOrReset(fencedErr)
	}
	if len(unknown) > 0 {
		e.warnOnce("unknown-commit", "the transaction listed partitions the engine holds no state for; their committed offsets were kept", "partitions", unknown)
	}
	e.obs.Committed(CommitEvent{Group: e.opts.Group, Source: e.plan.Source, Committed: committed && err == nil, Records: tx.records, Duration: time.Since(start)})
	if err != nil || !committed {
		return e.notCommitted(tx, try, err)
	}
	e.stats.Batches.Add(1)
	e.mu.Lock()
	e.core.committed(tx)
	e.unlock()
	return nil
}

// awaitPreviousEnd waits, at most 500ms, until the coordinator has written
// the markers of the previous transaction. Kafka answers EndTxn before
// that, and with transaction version 2 (KIP-890) the next transaction's
// first request adds its partitions itself, so it reaches the coordinator
// while the previous one completes and is answered
// CONCURRENT_TRANSACTIONS:
//
//   - a TxnOffsetCommit (a transaction that only commits offsets): franz-go
//     (v1.22.3) aborts the transaction instead of retrying; on Kafka a
//     healthy backlog aborted about one transaction in ten and delivered
//     its records again;
//   - a Produce (a transaction with moves): franz-go retries it after its
//     produce backoff, 250ms doubling up to 5s per consecutive failure of
//     that broker's sink; e2e/bench on Kafka saw transactions of 4.4s and
//     retries 5–10s late during a backlog drain.
//
// Brokers that do not describe transactions are not waited for. The
// poll starts at 2ms and doubles up to 50ms: markers take milliseconds on
// a healthy cluster, and a coordinator that stays in Prepare* is asked
// about a dozen times in the 500ms, not 250 (found by a breaker helper).
func (e *Engine) awaitPreviousEnd(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	for pause := 2 * time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		ds, err := e.adm.DescribeTransactions(ctx, e.opts.TransactionalID)
		if err != nil {
			return
		}
		d, err := ds.On(e.opts.TransactionalID, nil)
		if err != nil || (d.State != "PrepareCommit" && d.State != "PrepareAbort") {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// produceMoves writes tx's moves in the open transaction and returns the
// errors of those that failed.
func (e *Engine) produceMoves(ctx context.Context, tx *txn) error {
	var (
		produceErr error
		errMu      sync.Mutex
	)
	for _, m := range tx.moves {
		e.sess.Produce(ctx, m.rec, func(r *kgo.Record, err error) {
			if err != nil {
				errMu.Lock()
				produceErr = errors.Join(produceErr, fmt.Errorf("writing to %s/%d: %w", r.Topic, r.Partition, err))
				errMu.Unlock()
			}
		})
	}
	flushErr := e.sess.Client().Flush(ctx)
	errMu.Lock() // a promise may still run after a failed Flush
	defer errMu.Unlock()
	return errors.Join(produceErr, flushErr)
}

// offsetsHook rewrites the session's TxnOffsetCommit: the session would
// commit the fetched positions, with the member id as metadata; commit
// instead, per partition, tx's commit point: the first record not done,
// and the offsetmap metadata of the records past it that are (progress.go).
// A partition the session lists that tx does not know keeps its last
// committed offset (never the fetched position, which may be past records
// not done; noted in unknown); every partition tx knows is written, its
// metadata with it.
func offsetsHook(tx *txn, committedBefore map[string]map[int32]kgo.EpochOffset, unknown *[]string) func(*kmsg.TxnOffsetCommitRequest) error {
	return func(req *kmsg.TxnOffsetCommitRequest) error {
		seen := map[string]map[int32]bool{}
		for i := range req.Topics {
			t := &req.Topics[i]
			seen[t.Topic] = map[int32]bool{}
			for j := range t.Partitions {
				p := &t.Partitions[j]
				seen[t.Topic][p.Partition] = true
				if cp, ok := tx.offsets[t.Topic][p.Partition]; ok {
					setCommit(p, cp)
				} else if c, ok := committedBefore[t.Topic][p.Partition]; ok {
					p.Offset, p.LeaderEpoch = c.Offset, c.Epoch
					*unknown = append(*unknown, fmt.Sprintf("%s/%d", t.Topic, p.Partition))
				}
			}
		}
		for topic, ps := range tx.offsets {
			for part, cp := range ps {
				if !seen[topic][part] {
					addOffset(req, topic, part, cp)
				}
			}
		}
		if len(req.Topics) == 0 {
			keepOneOffset(req, tx.fetched)
		}
		return nil
	}
}

// keepOneOffset adds one offset that changes nothing to a TxnOffsetCommit
// that carries none: one of the assignment's fetched commits (-1 where the
// group has none; a commit of its own is in tx.offsets, see keepCommits).
// Before the assignment's offsets are fetched (a transaction of parking
// ops alone) it adds nothing, and the transaction pays franz-go's 500ms
// wait (see fetched.go).
func keepOneOffset(req *kmsg.TxnOffsetCommitRequest, fetched groupCommits) {
	for topic, ps := range fetched {
		for part, cp := range ps {
			addOffset(req, topic, part, cp)
			return
		}
	}
}

// addOffset adds partition part of topic at cp to req.
func addOffset(req *kmsg.TxnOffsetCommitRequest, topic string, part int32, cp commitPoint) {
	i := slices.IndexFunc(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool { return t.Topic == topic })
	if i < 0 {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		req.Topics = append(req.Topics, rt)
		i = len(req.Topics) - 1
	}
	rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	rp.Partition = part
	setCommit(&rp, cp)
	req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
}

// setCommit sets p to commit cp, its metadata with it.
func setCommit(p *kmsg.TxnOffsetCommitRequestTopicPartition, cp commitPoint) {
	meta := cp.Meta
	p.Offset, p.LeaderEpoch, p.Metadata = cp.Offset, cp.Epoch, &meta
}

// notCommitted handles a transaction that did not commit (err from End, or
// aborted): the state is dropped once in-flight deliveries end, and the
// records after the last commit are delivered again.
func (e *Engine) notCommitted(tx *txn, try kgo.TransactionEndTry, err error) error {
	e.stats.Aborted.Add(1)
	if err != nil {
		e.log.Warn("transaction did not commit; records after the last commit will be delivered again", "err", err)
	} else if try == kgo.TryCommit {
		// franz-go aborts without an error after a rebalance, and when
		// the coordinator answered CONCURRENT_TRANSACTIONS to the
		// offsets (awaitPreviousEnd).
		e.log.Info("transaction aborted by the client (a rebalance, or the coordinator still completing the previous transaction); records after the last commit will be delivered again")
	}
	e.mu.Lock()
	if tx.gen == e.gen {
		e.reset()
	}
	e.unlock()
	e.waitDeliveries(e.opts.DeliveryTimeout + time.Second)
	if err != nil {
		// An End that failed may have returned before rewinding the
		// consumer to the committed offsets (franz-go returns at once
		// when its flush or abort of buffered records runs out of
		// time, as in a broker outage), and left the producer inside
		// the transaction. The state of those records is dropped
		// above: without a new session they would be delivered again
		// only once a new record made the next Begin fail — on a
		// quiet partition, never. A new session starts at the
		// committed offsets.
		return fmt.Errorf("%w: the transaction did not end: %w", errSessionReset, err)
	}
	return nil
}
