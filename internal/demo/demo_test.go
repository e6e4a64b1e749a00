package demo

import (
	"context"
	"testing"
	"time"
)

// TestDemoConservesEveryRecord runs the whole demo and checks the report:
// every produced record acknowledged or dead-lettered once, every failure
// behaviour exercised.
func TestDemoConservesEveryRecord(t *testing.T) {
	r, err := Run(context.Background(), Options{Records: 600})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	if !r.OK || r.Lost != 0 || r.Produced != 600 || r.Produced != r.Delivered+r.DeadLettered || r.DLQDuplicates != 0 {
		t.Fatalf("report not OK: %+v", r)
	}
	if r.OrderViolations != 0 {
		t.Errorf("%d order violations: %v", r.OrderViolations, r.OrderExamples)
	}
	if r.Parked == 0 {
		t.Errorf("nothing was parked: ordering key should park records behind retrying ones")
	}
	if r.DeadLetteredByClass["permanent"] == 0 || r.DeadLetteredByClass["exhausted"] == 0 {
		t.Errorf("expected both permanent and exhausted dead letters: %v", r.DeadLetteredByClass)
	}
	for _, tier := range []string{"orders.retry.200ms", "orders.retry.500ms", "orders.retry.1s"} {
		if r.Retried[tier] == 0 {
			t.Errorf("no record retried through %s: %v", tier, r.Retried)
		}
	}
	for class, n := range r.ExpectedDeadLettered {
		if r.DeadLetteredByClass[class] != n {
			t.Errorf("DLQ holds %d %s records, the app's behaviours predict %d", r.DeadLetteredByClass[class], class, n)
		}
	}
}

// TestDemoThatGivesUpReportsUnsettledNotLost: a demo that stops waiting at
// its deadline reports the records it did not see settle as unsettled, not
// as lost, and is not OK.
func TestDemoThatGivesUpReportsUnsettledNotLost(t *testing.T) {
	// The always-flaky records take at least 1.7s of tiers: a 1ms wait
	// cannot see them settle.
	r, err := Run(context.Background(), Options{Records: 200, Timeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK || !r.TimedOut || r.TimeoutMS != 1 || r.Unsettled == 0 || len(r.UnsettledIDs) == 0 || r.Lost != 0 || r.LostIDs != nil {
		t.Fatalf("report %+v, want not OK, timed out after 1ms with records unsettled and none lost", r)
	}
	if r.Produced != r.Delivered+r.DeadLettered+r.Unsettled {
		t.Fatalf("produced %d != delivered %d + dead-lettered %d + unsettled %d", r.Produced, r.Delivered, r.DeadLettered, r.Unsettled)
	}
}
