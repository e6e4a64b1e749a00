package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/retrytopics"
)

// newControlledEnv is a kfake cluster of its own with topic orders (one
// partition), for a test that holds requests inside it (ControlKey).
func newControlledEnv(t *testing.T) (*kfake.Cluster, *env) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(1), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	return c, &env{t: t, addrs: c.ListenAddrs(), plan: retrytopics.Plan{Source: "orders", DLQ: retrytopics.DLQTopic("orders")}, adm: adm, app: newRecorder()}
}

// A duplicate whose producer fences the older engine before its member
// shows in the group: it loads its producer ID beside its join
// (loadProducerID), and its JoinGroup can be the slower of the two. The
// older engine's End failed (INVALID_TXN_STATE), it asked the group at
// once, found only itself, rebuilt its session, rejoined under the
// instance id after the duplicate had joined, and so fenced the newer one,
// which exited (seen in a `make test` run of e2e's
// TestDuplicateOfATwoTopicProcess). The older one must look for the
// takeover for a while (takeoverWindow) and stop. Here kfake holds the
// duplicate's JoinGroup until the older engine has asked the group after
// its failed End, and the older engine's rejoin until the duplicate has
// joined. Embedded only, like the test above.
func TestDuplicateWhoseJoinLagsFencesTheOlder(t *testing.T) {
	if brokerKind != kafkatest.Embedded {
		t.Skip("holds requests inside kfake: embedded broker only")
	}
	c, e := newControlledEnv(t)
	a, b := newRecorder(), newRecorder()
	a.setAnswer(failing(map[string][]error{"v0": {e422}}))
	var (
		rb      atomic.Pointer[running]
		started atomic.Bool
		joins   atomic.Int32
		endDone atomic.Bool
		asked   = make(chan struct{}) // the older engine asked the group after its End failed
		bJoined = make(chan struct{})
		bInit   = make(chan struct{})
	)
	var askedOnce, initOnce sync.Once
	c.ControlKey(int16(kmsg.JoinGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !started.Load() {
			return nil, nil, false
		}
		switch joins.Add(1) {
		case 1: // the duplicate's
			c.SleepControl(func() {
				select {
				case <-asked:
					time.Sleep(200 * time.Millisecond) // the older engine has its answer
				case <-time.After(10 * time.Second):
					t.Error("the older engine did not ask the group within 10s of its failed End")
				}
			})
		case 2: // the older engine's rejoin after a rebuilt session
			c.SleepControl(func() {
				select {
				case <-bJoined:
				case <-time.After(10 * time.Second):
				}
			})
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.DescribeGroups), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if endDone.Load() {
			askedOnce.Do(func() { close(asked) })
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if started.Load() {
			initOnce.Do(func() { close(bInit) })
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		// The older engine's End of the transaction that moves v0 to the
		// DLQ: start the duplicate and hold the EndTxn until the
		// duplicate's InitProducerID has bumped the epoch.
		if !req.Commit || len(a.callsForValue("v0")) == 0 || !started.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		go func() {
			r := e.runEngine(e.staticOptions(b, "dup"))
			rb.Store(r)
			<-r.eng.Joined()
			close(bJoined)
		}()
		c.SleepControl(func() {
			select {
			case <-bInit:
			case <-time.After(10 * time.Second):
				t.Error("the duplicate's InitProducerID did not come within 10s")
			}
		})
		endDone.Store(true)
		return nil, nil, false
	})
	ra := e.runEngine(e.staticOptions(a, "dup"))
	e.produce(e.values("v", 3, 1)...)
	select {
	case <-ra.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the older engine did not stop within 20s of the duplicate's start (joins seen: %d)", joins.Load())
	}
	var fe *FencedError
	if !errors.As(ra.res, &fe) {
		t.Errorf("the older engine's Run = %v, want a *FencedError", ra.res)
	}
	r := rb.Load()
	if r == nil {
		t.Fatal("the duplicate never started")
	}
	newerStillRuns(t, r)
	e.produce(e.values("w", 3, 1)...)
	eventually(t, "the newer engine delivering every w record", deliveredAll(b, "w", 3))
}

// newerStillRuns fails t if the newer engine r of a takeover stopped
// within 3s of the older one: a rejoin by the older engine would have
// fenced it by then.
func newerStillRuns(t *testing.T, r *running) {
	t.Helper()
	time.Sleep(3 * time.Second)
	if done, err := r.stopped(); done {
		t.Fatalf("the newer engine stopped: %v", err)
	}
}

// deliveredAll reports whether d has seen each of the values
// prefix0..prefix(n-1).
func deliveredAll(d *recorder, prefix string, n int) func() bool {
	return func() bool {
		for i := range n {
			if len(d.callsForValue(fmt.Sprintf("%s%d", prefix, i))) == 0 {
				return false
			}
		}
		return true
	}
}
