package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/pkg/delivery"
)

// TestRedrivenRecordNeverBlocksItsKey: a redriven record that keeps failing
// transiently waits in the tiers, but later records of its key are
// delivered at once, in order, not parked behind it (docs/DLQ.md, "Per-key
// order").
func TestRedrivenRecordNeverBlocksItsKey(t *testing.T) {
	e := newEnv(t, 1, 50*time.Millisecond, time.Hour)
	c := e.client()
	snap := deadLetter(t, e, c, 1)
	a := snap.Entries[0]
	e.app.set(func(m *delivery.Message) error {
		if m.ID == a.ID {
			return &delivery.StatusError{Status: 503}
		}
		return nil
	})
	if _, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1}); err != nil {
		t.Fatal(err)
	}
	// Attempt 2 comes from the first tier; the record then waits an hour on
	// the second.
	eventually(t, "the redriven record's second attempt", func() bool { return len(e.app.redriven()) >= 2 })
	e.produce(&kgo.Record{Key: a.Key, Value: []byte("d")}, &kgo.Record{Key: a.Key, Value: []byte("e")})
	var d, f string
	eventually(t, "the key's later records delivered", func() bool {
		e.app.mu.Lock()
		defer e.app.mu.Unlock()
		d, f = "", ""
		for _, m := range e.app.calls {
			switch string(m.Value) {
			case "d":
				d = m.ID
			case "e":
				f = m.ID
				if d == "" {
					t.Errorf("e delivered before d")
				}
			}
		}
		return d != "" && f != ""
	})
	if e.app.ackedCount(a.ID) != 0 {
		t.Fatalf("the redriven record was acknowledged; it should still be waiting on the second tier")
	}
	rs := e.app.redriven()
	if rs[1].Attempt != 2 || rs[1].Redrives != 1 {
		t.Fatalf("second redriven delivery: attempt %d redrives %d, want 2, 1", rs[1].Attempt, rs[1].Redrives)
	}
}
