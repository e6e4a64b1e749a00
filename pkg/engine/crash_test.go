package engine

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// fastGroup makes a dead member leave the group within about a second.
var fastGroup = []kgo.Opt{kgo.SessionTimeout(time.Second), kgo.HeartbeatInterval(100 * time.Millisecond)}

// TestCrashBetweenProduceAndCommit kills the engine's network after a
// batch's moves are flushed into its open transaction and before the
// transaction ends (the client is then as good as a killed process), starts
// a successor with the same transactional ID and checks that every record
// sits in exactly one place downstream.
func TestCrashBetweenProduceAndCommit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(*delivery.Message) error
		dest   func(*env) string
	}{
		{"to DLQ", func(*delivery.Message) error { return &delivery.StatusError{Status: 422} },
			func(e *env) string { return e.plan.DLQ }},
		{"to tier", func(m *delivery.Message) error {
			if m.Attempt == 1 {
				return &delivery.StatusError{Status: 503}
			}
			return nil
		}, func(e *env) string { return e.plan.Tiers[0].Topic }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1, 100*time.Millisecond)
			e.app.setAnswer(tc.answer)
			const n = 20
			var recs []*kgo.Record
			for i := range n {
				recs = append(recs, rec("k"+strconv.Itoa(i), "v"))
			}
			e.produce(recs...)

			d := &severableDialer{}
			crashed := make(chan struct{})
			var once atomic.Bool
			oA := e.options(e.app)
			oA.ClientOpts = []kgo.Opt{kgo.Dialer(d.dial), kgo.RetryTimeout(2 * time.Second)}
			oA.GroupOpts = fastGroup
			oA.beforeEnd = func() {
				if once.CompareAndSwap(false, true) {
					d.sever()
					close(crashed)
				}
			}
			_, stopA := e.start(oA)
			<-crashed
			go stopA()

			oB := e.options(e.app) // same transactional ID: a restarted process
			oB.GroupOpts = fastGroup
			engB, _ := e.start(oB)
			eventually(t, "successor commits the batch", func() bool { return engB.Stats().Batches.Load() > 0 })

			var got []*kgo.Record
			eventually(t, "all records downstream", func() bool {
				got = e.readAll(tc.dest(e))
				return len(got) >= n
			})
			seen := map[string]int{}
			for _, r := range got {
				off, _ := header(r, retrytopics.HeaderOriginalOffset)
				seen[off]++
			}
			for i := range n {
				if c := seen[strconv.Itoa(i)]; c != 1 {
					t.Errorf("record at offset %d is %d times in %s, want exactly 1", i, c, tc.dest(e))
				}
			}
			if len(got) != n {
				t.Errorf("%s holds %d committed records, want %d", tc.dest(e), len(got), n)
			}
		})
	}
}

// TestPausedTierSurvivesRevokeAndReassign moves a record to a 1.5s tier,
// then forces its partition away from the owner (an eager rebalance when a
// second member joins) and back (when that member leaves) during the wait.
// The record must be delivered once more, not before its due time.
func TestPausedTierSurvivesRevokeAndReassign(t *testing.T) {
	e := newEnv(t, 1, 1500*time.Millisecond)
	e.app.setAnswer(func(m *delivery.Message) error {
		if m.Attempt == 1 {
			return &delivery.StatusError{Status: 503}
		}
		return nil
	})
	e.produce(rec("k", "v"))
	eager := append([]kgo.Opt{kgo.Balancers(kgo.RangeBalancer())}, fastGroup...)
	oA := e.options(e.app)
	oA.GroupOpts = eager
	engA, _ := e.start(oA)
	eventually(t, "moved to the tier", func() bool { return engA.Stats().Retried[0].Load() == 1 })
	moved := time.Now()

	oB := e.options(e.app)
	oB.TransactionalID += "-b"
	oB.GroupOpts = eager
	_, stopB := e.start(oB)
	// Eager rebalancing revokes everything from A when B joins.
	eventually(t, "A's partitions revoked", func() bool { return engA.Stats().Revoked.Load() >= 2 })
	time.Sleep(300 * time.Millisecond)
	stopB()
	stoppedB := time.Now()

	eventually(t, "delivered on retry", func() bool { return e.app.numAcked() == 1 })
	cs := e.app.callsFor(id(e.plan.Source, 0, 0))
	if len(cs) != 2 {
		for _, c := range cs {
			t.Logf("attempt %d at %v", c.msg.Attempt, c.at.Format(time.StampMilli))
		}
		t.Logf("aborted A=%d batches A=%d stopB done at %v", engA.Stats().Aborted.Load(), engA.Stats().Batches.Load(), stoppedB.Format(time.StampMilli))
		t.Fatalf("%d deliveries, want 2", len(cs))
	}
	tier := e.readAll(e.plan.Tiers[0].Topic)
	due, _ := header(tier[0], retrytopics.HeaderDueTime)
	dt, err := time.Parse(time.RFC3339Nano, due)
	if err != nil {
		t.Fatal(err)
	}
	if cs[1].at.Before(dt) {
		t.Errorf("delivered at %v, %v before its due time", cs[1].at, dt.Sub(cs[1].at))
	}
	if late := cs[1].at.Sub(dt); late > time.Second {
		t.Errorf("delivered %v after its due time", late)
	}
	t.Logf("moved %v, due %v, delivered %v", moved.Format(time.StampMilli), dt.Format(time.StampMilli), cs[1].at.Format(time.StampMilli))
}
