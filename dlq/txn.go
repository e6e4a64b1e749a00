package dlq

// The transaction of one batch of moves: its records and their marks
// written and committed together, or nothing of them.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producer is the DLQ's transactional producer of one operation, with
// the reader that checks its transactions committed (verify.go).
type producer struct {
	c  *Client
	cl *kgo.Client
	rd *kgo.Client // nil until the first check
	// unchecked is set once a check could not finish (committed).
	unchecked bool
}

// newProducer starts the DLQ's transactional producer: its
// InitProducerID fences an older operation and aborts its open
// transaction.
func (c *Client) newProducer(ctx context.Context) (*producer, error) {
	cl, err := kgo.NewClient(append(slices.Clone(c.opts), kgo.TransactionalID(TransactionalID(c.t.DLQ)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second))...)
	if err != nil {
		return nil, err
	}
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("initializing the transactional producer %s: %w", TransactionalID(c.t.DLQ), err)
	}
	return &producer{c: c, cl: cl}, nil
}

// renew replaces p's client with a new one of the same transactional id,
// for after a transaction the client ended aborted although asked to
// commit: produced from again, that client's next record was refused
// with OUT_OF_ORDER_SEQUENCE_NUMBER (verify.go).
func (p *producer) renew(ctx context.Context) error {
	p.cl.Close()
	np, err := p.c.newProducer(ctx)
	if err != nil {
		p.cl = nil
		return err
	}
	p.cl = np.cl
	return nil
}

// Close closes p's clients.
func (p *producer) Close() {
	if p.cl != nil {
		p.cl.Close()
	}
	if p.rd != nil {
		p.rd.Close()
	}
}

// commit writes recs in one transaction.
func (p *producer) commit(ctx context.Context, recs []*kgo.Record) error {
	tx := p.cl
	if err := tx.BeginTransaction(); err != nil {
		return err
	}
	perr, err := produce(ctx, tx, recs...)
	if err != nil {
		// Not ended: the transaction stays open until the rerun's
		// InitProducerID (or the transaction timeout) aborts it; the
		// caller closes tx, which fails the records still buffered.
		return fmt.Errorf("%s was not acknowledged (%w); run the same command again to continue once the brokers answer (nothing of this transaction is committed)", p.txnOf(recs), err)
	}
	how := kgo.TryCommit
	if perr != nil {
		how = kgo.TryAbort
	}
	err = p.c.endTxn(ctx, tx, how)
	if err = errors.Join(perr, err); err != nil {
		// A newer InitProducerID for the same transactional id: Kafka
		// answers PRODUCER_FENCED or INVALID_PRODUCER_EPOCH, kfake also
		// INVALID_PRODUCER_ID_MAPPING (the id is no longer ours).
		if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.InvalidProducerIDMapping) {
			return fmt.Errorf("%w: %w", ErrFenced, err)
		}
		// The commit's outcome may be unknown (a timeout): a rerun reads the
		// marks after fencing, so whatever did commit is not moved twice.
		return fmt.Errorf("%s failed; run the same command again to continue (what it moved, if anything, is marked and is not moved twice): %w", p.txnOf(recs), err)
	}
	return nil
}

// txnOf names a transaction of recs for an error: its moves (one mark
// each) and, for a redrive, its records (a copy beside each mark), so
// that "6 records" is not read as six records moved.
func (p *producer) txnOf(recs []*kgo.Record) string {
	marks, topic := 0, MarksTopic(p.c.t.DLQ)
	for _, r := range recs {
		if r.Topic == topic {
			marks++
		}
	}
	if marks == len(recs) {
		return fmt.Sprintf("a transaction of %d moves", marks)
	}
	return fmt.Sprintf("a transaction of %d moves (%d records: the copies and their marks)", marks, len(recs))
}

// produce writes recs and waits until each is acknowledged or failed
// (perr, the first failure), or until ctx ends (err). Not ProduceSync: an
// idempotent producer never fails a record sent without an answer (a broker
// killed or unreachable), and ProduceSync waits for every record whatever
// ctx says, so a redrive and its lease renewals would hang, deaf to
// Ctrl-C, for as long as the brokers are down.
func produce(ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) (perr, err error) {
	var mu sync.Mutex
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			mu.Lock()
			if err != nil && perr == nil {
				perr = err
			}
			mu.Unlock()
		})
	}
	err = cl.Flush(ctx)
	mu.Lock()
	defer mu.Unlock()
	return perr, err
}
