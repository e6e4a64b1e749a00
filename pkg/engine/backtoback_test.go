package engine

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/pkg/delivery"
)

// TestBackToBackOffsetOnlyTransactionsCommit: a healthy backlog commits in
// transactions that only commit offsets, one right after the other. On
// Kafka the next one's TxnOffsetCommit could reach the coordinator while
// the previous one's markers were still being written: CONCURRENT_
// TRANSACTIONS, and franz-go aborted it (about one transaction in ten in
// e2e/bench; every record after the last commit delivered again). None may
// abort, and no record is delivered twice.
func TestBackToBackOffsetOnlyTransactionsCommit(t *testing.T) {
	e := newEnv(t, 4)
	const n = 6000
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = rec("k"+strconv.Itoa(i%500), "v"+strconv.Itoa(i))
		recs[i].Partition = int32(i % 4)
	}
	e.produce(recs...)
	o := e.options(e.app)
	o.MaxPending = 200 // a commit is due every 100 settled records: back to back
	o.CommitInterval = time.Hour
	eng, _ := e.start(o)
	deadline := time.Now().Add(60 * time.Second)
	for e.app.numAcked() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := e.app.numAcked(); got < n {
		t.Fatalf("%d of %d records acknowledged; batches %d aborted %d", got, n, eng.Stats().Batches.Load(), eng.Stats().Aborted.Load())
	}
	if a, b := eng.Stats().Aborted.Load(), eng.Stats().Batches.Load(); a != 0 {
		t.Errorf("%d of %d transactions aborted, want none", a, a+b)
	}
	if calls := e.app.numCalls(); calls != n {
		t.Errorf("%d deliveries of %d records: %d delivered again", calls, n, calls-n)
	}
}

// TestTransactionWithMovesWaitsForThePreviousMarkers: a transaction's first
// produce follows a DescribeTransactions that found the previous one
// complete. On Kafka (transaction version 2) a produce sent while the
// previous transaction's markers are written is answered
// CONCURRENT_TRANSACTIONS and franz-go backs off 250ms and more (e2e/bench
// saw 4.4s transactions). The embedded broker writes markers at once, so
// the test asserts the order of requests, not a delay: every produce that
// opens a transaction less than 900ms after the broker saw the previous
// End (the engine waits when its own End returned under a second ago, and
// that is later than the broker saw it) follows a DescribeTransactions.
func TestTransactionWithMovesWaitsForThePreviousMarkers(t *testing.T) {
	c, e := newControlledEnv(t)
	o := e.options(e.app)
	var (
		mu        sync.Mutex
		seq       []string // "end", "describe", "produce", as the broker got them
		lastEnd   time.Time
		following int // produces that began a transaction within 900ms of another's End
		unwaited  int // ... with no DescribeTransactions in between
	)
	note := func(what string) {
		mu.Lock()
		defer mu.Unlock()
		if what == "produce" && len(seq) > 0 && seq[len(seq)-1] != "produce" && time.Since(lastEnd) < 900*time.Millisecond {
			if end := lastIndex(seq, "end"); end >= 0 {
				following++
				if !slices.Contains(seq[end+1:], "describe") {
					unwaited++
				}
			}
		}
		if what == "end" {
			lastEnd = time.Now()
		}
		seq = append(seq, what)
	}
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if kreq.(*kmsg.EndTxnRequest).TransactionalID == o.TransactionalID {
			note("end")
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.DescribeTransactions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if slices.Contains(kreq.(*kmsg.DescribeTransactionsRequest).TransactionalIDs, o.TransactionalID) {
			note("describe")
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if id := kreq.(*kmsg.ProduceRequest).TransactionID; id != nil && *id == o.TransactionalID {
			note("produce")
		}
		return nil, nil, false
	})
	e.app.setAnswer(func(*delivery.Message) error { return e422 }) // every record a DLQ move
	const n = 200
	e.produce(e.values("v", n, 1)...)
	o.MaxPending = 20 // a transaction every 10 settled records: back to back
	// The records left after the last full batch commit on the interval
	// (fewer than 10 when delivery ran ahead of the transactions).
	o.CommitInterval = 200 * time.Millisecond
	e.start(o)
	eventually(t, "every record dead-lettered and its offset committed", func() bool {
		at, ok := e.committedAt(0)
		return ok && at >= n
	})
	mu.Lock()
	defer mu.Unlock()
	if following < 3 {
		t.Fatalf("only %d transactions produced after another ended; the test needs back-to-back transactions with moves (requests: %v)", following, seq)
	}
	if unwaited > 0 {
		t.Errorf("%d of %d transactions produced after the previous End without describing the transaction first", unwaited, following)
	}
}

// lastIndex is the index of the last s in seq, or -1.
func lastIndex(seq []string, s string) int {
	for i := len(seq) - 1; i >= 0; i-- {
		if seq[i] == s {
			return i
		}
	}
	return -1
}
