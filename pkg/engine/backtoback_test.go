package engine

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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
