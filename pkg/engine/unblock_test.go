package engine

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// TestUnblockPrecedesTheKeysNextBlock: K's last parked record is delivered
// (K unblocks) while a transaction that was prepared before is committing,
// and K's next record arrives, fails and becomes K's new head before the
// next transaction is prepared. The changelog must hold K's unblock before
// its new block: replayed the other way round, the unblock clears the new
// head and a successor delivers the record parked behind it at once,
// before the head's retry.
func TestUnblockPrecedesTheKeysNextBlock(t *testing.T) {
	e := newEnv(t, 1, time.Second)
	e.app.setAnswer(failing(map[string][]error{"v0": {e503}, "v2": {e503}}))
	e.produce(rec("K", "v0"), rec("K", "v1"))

	producer, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()

	// A holds v1's delivery until a transaction is about to end, then lets
	// it finish, waits until K is unblocked and produces v2 and v3.
	var engA atomic.Pointer[Engine]
	v1Waiting, v1Go, produced := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var waitOnce, hookOnce sync.Once
	app := &holdingApp{recorder: e.app, hold: func(ctx context.Context, m *delivery.Message) {
		if string(m.Value) != "v1" {
			return
		}
		waitOnce.Do(func() { close(v1Waiting) })
		select {
		case <-v1Go:
		case <-ctx.Done():
		}
	}}
	oA := e.keyedOptions(app, flow.OnDeadLetterRelease)
	oA.CommitInterval = time.Second // v2 fails well before the next transaction
	oA.DeliveryTimeout, oA.ShutdownGrace = 10*time.Second, 10*time.Second
	oA.beforeEnd = func() {
		select {
		case <-v1Waiting:
		default:
			return
		}
		hookOnce.Do(func() {
			defer close(produced)
			close(v1Go)
			deadline := time.Now().Add(10 * time.Second)
			for {
				if eng := engA.Load(); eng != nil && eng.Stats().BlockedKeys.Load() == 0 && eng.Stats().ParkedRecords.Load() == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Error("K did not unblock after v1's delivery")
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			recs := []*kgo.Record{rec("K", "v2"), rec("K", "v3")}
			for _, r := range recs {
				r.Topic = e.plan.Source
			}
			if err := producer.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
				t.Errorf("producing v2, v3: %v", err)
			}
		})
	}
	eng, stopA := e.start(oA)
	engA.Store(eng)
	select {
	case <-produced:
	case <-time.After(30 * time.Second):
		t.Fatal("v1 was not delivered during a transaction")
	}
	eventually(t, "v2's first attempt failed", func() bool { return len(e.app.callsForValue("v2")) > 0 })
	stopA()
	if n := len(e.app.callsForValue("v3")); n != 0 {
		t.Fatalf("the first engine delivered v3 (%d times) before v2's retry", n)
	}
	if n := len(e.app.callsForValue("v2")); n != 1 {
		t.Fatalf("the first engine delivered v2 %d times, want once (its retry is due after the stop)", n)
	}

	engB, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
	eventually(t, "K drained by the successor", func() bool { return len(e.app.ackedValues("K")) == 4 })
	if got := strings.Join(e.app.ackedValues("K"), ","); got != "v0,v1,v2,v3" {
		t.Errorf("K acknowledged %s, want v0,v1,v2,v3: the successor did not replay v2 as K's head", got)
	}
	if v3, v2 := e.app.callsForValue("v3"), e.app.firstAck("v2"); len(v3) == 0 || v3[0].at.Before(v2) {
		t.Errorf("v3 delivered before v2's successful retry at %v", v2)
	}
	eventually(t, "nothing blocked or parked on the successor", func() bool {
		return engB.Stats().BlockedKeys.Load() == 0 && engB.Stats().ParkedRecords.Load() == 0
	})
}

// holdingApp runs hold before the recorder.
type holdingApp struct {
	*recorder
	hold func(context.Context, *delivery.Message)
}

func (h *holdingApp) Deliver(ctx context.Context, m *delivery.Message) error {
	h.hold(ctx, m)
	return h.recorder.Deliver(ctx, m)
}
