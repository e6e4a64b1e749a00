package dlq_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/retrytopics"
)

// abortReportingNil ends the first n transactions with an abort and
// reports success, as franz-go v1.22.3's EndTransaction(TryCommit) did
// under load (dlq/verify.go); later ones end as asked. It counts the
// transactions ended.
func abortReportingNil(n int32, ended *atomic.Int32) func(context.Context, *kgo.Client, kgo.TransactionEndTry) error {
	return func(ctx context.Context, tx *kgo.Client, how kgo.TransactionEndTry) error {
		if ended.Add(1) <= n {
			return tx.EndTransaction(ctx, kgo.TryAbort)
		}
		return tx.EndTransaction(ctx, how)
	}
}

// TestCommitEndedAbortedIsWrittenAgain: a discard whose transaction ends
// aborted although asked to commit, its client saying nothing, writes the
// marks again in a new transaction: every record is marked once the
// discard reports it moved, and one transaction more was ended. Without
// the check the discard reported 3 moved and left all 3 waiting.
func TestCommitEndedAbortedIsWrittenAgain(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	c := e.client()
	deadLetter(t, e, c, 3)
	var ended atomic.Int32
	res, err := e.client(dlq.WithEndTransaction(abortReportingNil(1, &ended))).Move(context.Background(),
		dlq.Request{Action: dlq.ActionDiscard, Reason: "verify test", Rate: -1})
	if err != nil || res.Moved != 3 {
		t.Fatalf("discard: %+v, %v; want 3 moved", res, err)
	}
	if got := ended.Load(); got != 2 {
		t.Fatalf("%d transactions ended, want 2 (the aborted one and its rewrite)", got)
	}
	allIn(t, c, dlq.Discarded, "a discard that reported it moved")
}

// TestCommitEndedAbortedEveryTime: when every try ends aborted, the
// operation stops with an error that says so and moves nothing; the
// records stay waiting.
func TestCommitEndedAbortedEveryTime(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	c := e.client()
	deadLetter(t, e, c, 2)
	var ended atomic.Int32
	res, err := e.client(dlq.WithEndTransaction(abortReportingNil(100, &ended))).Move(context.Background(),
		dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if err == nil || !strings.Contains(err.Error(), "aborted although asked to commit, 3 times") || res.Moved != 0 {
		t.Fatalf("redrive: %+v, %v; want an error naming 3 aborted tries and nothing moved", res, err)
	}
	allIn(t, c, dlq.Waiting, "a redrive that moved nothing")
}

// junkAfterFirstMark writes n records of another writer onto the marks
// topic right after the first transactional mark batch its client writes
// (the first batch there is the lease claim), so that they lie between
// the marks of one transaction.
type junkAfterFirstMark struct {
	t       *testing.T
	topic   string
	junk    *kgo.Client
	n       int
	batches atomic.Int32
}

func (h *junkAfterFirstMark) OnProduceBatchWritten(_ kgo.BrokerMetadata, topic string, _ int32, _ kgo.ProduceBatchMetrics) {
	if topic != h.topic || h.batches.Add(1) != 2 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range h.n {
		if err := h.junk.ProduceSync(ctx, &kgo.Record{Topic: h.topic, Key: []byte("junk")}).FirstErr(); err != nil {
			h.t.Error(err)
		}
	}
}

// TestCommitCheckCountsOnlyItsOwnMarks: a transaction of 3 marks that
// ends aborted, its client saying nothing, with 3 records of another
// writer between its marks (lease renewals are such records), is still
// found aborted and written again: the check counts the records at its
// marks' offsets, not whatever it can read between them (a breaker's
// finding: it counted the 3 others and reported 3 moved, 0 marked).
func TestCommitCheckCountsOnlyItsOwnMarks(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	c := e.client()
	deadLetter(t, e, c, 3)
	marks := createMarks(t, e)
	junk, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	if err := junk.ProduceSync(context.Background(), &kgo.Record{Topic: marks, Key: []byte("junk")}).FirstErr(); err != nil {
		t.Fatal(err) // warms junk's metadata
	}
	h := &junkAfterFirstMark{t: t, topic: marks, junk: junk, n: 3}
	var ended atomic.Int32
	// One mark per produce batch, so the junk lands between them.
	mc, err := dlq.New(e.topic(), []kgo.Opt{kgo.SeedBrokers(e.addrs...), kgo.WithHooks(h), kgo.MaxBufferedRecords(1)},
		dlq.WithLogger(testLogger(t)), dlq.WithLeaseTTL(2*time.Second), dlq.WithEndTransaction(abortReportingNil(1, &ended)))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	res, err := mc.Move(context.Background(), dlq.Request{Action: dlq.ActionDiscard, Reason: "verify test", Rate: -1})
	if err != nil || res.Moved != 3 || ended.Load() != 2 {
		t.Fatalf("discard: %+v, %v, %d transactions ended; want 3 moved in 2 (the aborted one, written again)", res, err, ended.Load())
	}
	allIn(t, c, dlq.Discarded, "a discard that reported it moved")
}

// TestMoveRefusesMarksBehindAnOpenTransaction: another producer's open
// transaction on the marks topic holds its last stable offset back, and
// marks committed after it could not be read, so a redrive would move
// records a second time. The redrive is refused, naming the offset and
// how to abort it, and moves nothing; once that transaction ends, it
// moves each record once (a breaker's finding: before, the read-back
// timed out, reported moved 0 and "run the same command again", and the
// rerun put a second copy of every record on the tier).
func TestMoveRefusesMarksBehindAnOpenTransaction(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	c := e.client()
	deadLetter(t, e, c, 3)
	marks := createMarks(t, e)
	other, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.TransactionalID("other-writer-"+e.plan.Source),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(context.Background(), &kgo.Record{Topic: marks, Key: []byte("junk")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if !errors.Is(err, dlq.ErrMarksUnreadable) || !strings.Contains(err.Error(), "--start-offset") || res != nil {
		t.Fatalf("redrive behind an open transaction: %+v, %v; want ErrMarksUnreadable naming how to abort it", res, err)
	}
	if snap, err := c.Read(context.Background()); err != nil {
		t.Fatal(err)
	} else if snap.MarksOpenFrom != 0 {
		t.Errorf("a list behind the open transaction: marks open from %d; want 0 (its first offset), for kretry dlq list's note", snap.MarksOpenFrom)
	}
	if err := other.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	res, err = c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if err != nil || res.Moved != 3 {
		t.Fatalf("redrive once it ended: %+v, %v; want 3 moved", res, err)
	}
	copies := 0
	for _, r := range readAll(t, e, e.topic().Tier) {
		if o, err := retrytopics.ReadOrigin(r, false, 0); err == nil && o.Redrives == 1 {
			copies++
		}
	}
	if copies != 3 {
		t.Fatalf("%d redriven copies on the tier, want 3 (one per record)", copies)
	}
	if snap, err := c.Read(context.Background()); err != nil {
		t.Fatal(err)
	} else if snap.MarksOpenFrom != -1 {
		t.Errorf("a list once it ended: marks open from %d; want -1 (none open)", snap.MarksOpenFrom)
	}
}

// createMarks creates the marks topic of e's DLQ as kretry does (one
// partition, compacted) and returns its name.
func createMarks(t *testing.T, e *env) string {
	t.Helper()
	return createMarksWith(t, e, "compact")
}

// createMarksWith creates the marks topic of e's DLQ with one partition
// and cleanup.policy policy, as an operator might, and returns its name.
func createMarksWith(t *testing.T, e *env, policy string) string {
	t.Helper()
	marks := dlq.MarksTopic(e.plan.DLQ)
	if _, err := e.adm.CreateTopic(context.Background(), 1, -1, map[string]*string{"cleanup.policy": &policy}, marks); err != nil {
		t.Fatal(err)
	}
	if err := kafkatest.WaitTopics(context.Background(), e.adm, marks); err != nil {
		t.Fatal(err)
	}
	return marks
}

// allIn fails t unless every record of c's DLQ is in state want, after
// what happened.
func allIn(t *testing.T, c *dlq.Client, want dlq.State, after string) {
	t.Helper()
	snap, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range snap.Entries {
		if en.State != want {
			t.Fatalf("%s is %s after %s", en.Ref(), en.State, after)
		}
	}
}
