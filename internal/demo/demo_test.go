package demo

import (
	"context"
	"testing"
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
