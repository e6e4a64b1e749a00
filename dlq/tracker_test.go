package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/kretry/kretry/dlq"
)

// TestTrackerCountsWaitingAndRedriveResults: waiting means neither
// redriven nor discarded; a redriven record that fails again counts as
// returned under the class it was redriven with, and waits again.
func TestTrackerCountsWaitingAndRedriveResults(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := dlq.NewTracker(c)
	go tr.Run(ctx)
	rd := dlq.NewManualReaderProvider()
	stop, err := dlq.RegisterMetrics(rd.Provider, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	eventually(t, "3 waiting", func() bool { s := tr.Summary(); return s.Ready && s.Waiting == 3 })

	e.app.set(rejectAll)
	if _, err := c.Move(ctx, dlq.Request{Action: dlq.ActionRedrive, Filter: dlq.Filter{Records: []string{snap.Entries[0].Ref()}}, Rate: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Move(ctx, dlq.Request{Action: dlq.ActionDiscard, Filter: dlq.Filter{Records: []string{snap.Entries[1].Ref()}}, Reason: "test", Rate: -1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the redriven record back, 2 waiting", func() bool {
		s := tr.Summary()
		return s.Waiting == 2 && s.Redriven["permanent"] == 1 && s.Returned["permanent"] == 1
	})
	got := rd.Gauges(t)
	if got["kretry.dlq.waiting_records"] != 2 || got["kretry.dlq.redriven_records"] != 1 || got["kretry.dlq.redrive_returned_records"] != 1 || got["kretry.dlq.oldest_waiting_age"] <= 0 {
		t.Fatalf("gauges %v", got)
	}
}
