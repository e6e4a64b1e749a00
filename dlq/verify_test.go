package dlq_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
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
	snap, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range snap.Entries {
		if en.State != dlq.Discarded {
			t.Fatalf("%s is %s after a discard that reported it moved", en.Ref(), en.State)
		}
	}
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
	snap, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range snap.Entries {
		if en.State != dlq.Waiting {
			t.Fatalf("%s is %s after a redrive that moved nothing", en.Ref(), en.State)
		}
	}
}
