package dlq_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
)

// TestRedriveUnderTheRetryBudget: redriven records arrive on the first
// tier, so the retry budget (retry.budget, docs/OVERLOAD.md) counts them
// as retries. 60 records redriven at no rate limit under a budget of 20 %
// plus 4 retries/s: fresh records produced right after are all delivered
// while most redriven ones still wait (first attempts are not starved),
// the budget refuses some redriven deliveries (they wait, paused), and
// every redriven record is still delivered, once, by the floor of 4/s
// (never stuck behind the budget), none back in the DLQ.
func TestRedriveUnderTheRetryBudget(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	gate := overload.New(overload.Config{MaxInFlight: 8, Logger: testLogger(t),
		Budget: overload.BudgetConfig{Ratio: 0.2, MinPerSecond: 4, Window: 10 * time.Second}})
	const n, fresh = 60, 20
	snap := deadLetterWith(t, e, c, n, func() { e.runWith(gate) })
	var redrivenDelivered atomic.Int64
	e.app.set(func(m *delivery.Message) error {
		if m.Redrives > 0 {
			redrivenDelivered.Add(1)
		}
		return nil
	})
	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if err != nil || res.Moved != n {
		t.Fatalf("redrive: %+v, %v; want %d moved", res, err, n)
	}
	start := time.Now()
	var recs []*kgo.Record
	for i := range fresh {
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Key: fmt.Appendf(nil, "fresh-%d", i), Value: []byte("new")})
	}
	e.produce(recs...)
	var atFresh int64
	eventually(t, "every fresh record delivered", func() bool {
		atFresh = redrivenDelivered.Load()
		k := 0
		for i := range fresh {
			if e.app.ackedCount(fmt.Sprintf("%s/%d/%d", e.plan.Source, i%2, n/2+i/2)) == 1 {
				k++
			}
		}
		return k == fresh
	})
	t.Logf("fresh records all delivered after %v, with %d of %d redriven ones delivered", time.Since(start).Round(time.Millisecond), atFresh, n)
	if atFresh >= n {
		t.Errorf("the fresh records waited for all %d redriven ones: first attempts were held up by the redrive", n)
	}
	for _, en := range snap.Entries {
		eventually(t, en.ID+" redriven and acknowledged", func() bool { return e.app.ackedCount(en.ID) >= 1 })
	}
	took := time.Since(start)
	s := gate.Snapshot(time.Now())
	t.Logf("all %d redriven records delivered after %v (%.1f/s); budget denied %d, retry ratio %.2f", n, took.Round(time.Millisecond), float64(n)/took.Seconds(), s.BudgetDenied, s.RetryRatio)
	if s.BudgetDenied == 0 {
		t.Errorf("the budget denied no redriven delivery: redriven records are retries to the budget")
	}
	for _, en := range snap.Entries {
		if k := e.app.ackedCount(en.ID); k != 1 {
			t.Errorf("%s acknowledged %d times, want 1", en.ID, k)
		}
	}
	if st := dlq.StatsOf(mustRead(t, c).Entries); st.Total != n || st.Waiting != 0 {
		t.Errorf("stats %+v, want %d records, none waiting", st, n)
	}
}
