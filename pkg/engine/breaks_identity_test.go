package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// A process whose static member was replaced by a duplicate (same
// instance id) and that is stopped before it noticed — in `kretry run`, a
// sibling engine of another topic was fenced and took the whole process
// down, or a SIGTERM came first — must not remove the duplicate's member
// when it leaves the group: its LeaveGroup names its own member id, and a
// broker must refuse it (FENCED_INSTANCE_ID) rather than resolve the
// instance id to the newer member and remove that one.
func TestCleanStopDoesNotRemoveTheDuplicatesMember(t *testing.T) {
	e := newEnv(t, 2)
	a, b := newRecorder(), newRecorder()
	oa := e.staticOptions(a, "dup")
	// A heartbeats rarely: it is stopped before it learns that b took its
	// instance id over.
	oa.GroupOpts = []kgo.Opt{kgo.SessionTimeout(30 * time.Second), kgo.HeartbeatInterval(10 * time.Second)}
	ra := e.runEngine(oa)
	select {
	case <-ra.eng.Joined():
	case <-time.After(30 * time.Second):
		t.Fatal("a did not join within 30s")
	}
	aMember, _ := ra.eng.cl.Load().GroupMetadata()
	rb := e.runEngine(e.staticOptions(b, "dup"))
	select {
	case <-rb.eng.Joined():
	case <-time.After(30 * time.Second):
		t.Fatal("b did not join within 30s")
	}
	bMember, _ := rb.eng.cl.Load().GroupMetadata()
	if bMember == "" || bMember == aMember {
		t.Fatalf("b's member id %q, a's %q: want b to hold a member of its own", bMember, aMember)
	}
	ra.cancel()
	select {
	case <-ra.done:
	case <-time.After(30 * time.Second):
		t.Fatal("a did not stop within 30s")
	}
	gs, err := e.adm.DescribeGroups(context.Background(), e.group())
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	found := false
	for _, m := range gs[e.group()].Members {
		members = append(members, m.MemberID)
		if m.InstanceID != nil && *m.InstanceID == "dup" && m.MemberID == bMember {
			found = true
		}
	}
	if !found {
		t.Errorf("after a's clean stop the group's members are %q: b's static member %q (instance id \"dup\") was removed by a's leave", members, bMember)
	}
	if done, err := rb.stopped(); done {
		t.Errorf("b stopped: %v", err)
	}
}

// A duplicate (same instance id, so the same transactional id) that joins
// while the older engine is inside a transaction: the duplicate's producer
// aborts the older one's transaction and bumps the epoch, so the older
// one's End fails (on kfake with INVALID_TXN_STATE, not PRODUCER_FENCED)
// and its next Begin cannot start. The older one must see that another
// member holds its instance id and stop with a *FencedError; it must not
// rebuild its session, which would rejoin under the id and fence the
// newer one (README: the older one exits, the newer delivers).
func TestDuplicateJoiningMidTransactionFencesTheOlder(t *testing.T) {
	e := newEnv(t, 1)
	a, b := newRecorder(), newRecorder()
	a.setAnswer(failing(map[string][]error{"v0": {e422}}))
	oa := e.staticOptions(a, "dup")
	var (
		rb      *running
		started atomic.Bool
		bDone   = make(chan struct{})
	)
	oa.beforeEnd = func() {
		// In the transaction that moves v0 to the DLQ: start the duplicate
		// and wait until its producer has committed a transaction (its
		// InitProducerID aborted ours).
		if len(a.callsForValue("v0")) == 0 || !started.CompareAndSwap(false, true) {
			return
		}
		defer close(bDone)
		rb = e.runEngine(e.staticOptions(b, "dup"))
		select {
		case <-rb.eng.Joined():
		case <-time.After(20 * time.Second):
			t.Error("the duplicate did not join within 20s")
			return
		}
		e.produce(e.values("w", 3, 1)...)
		deadline := time.Now().Add(20 * time.Second)
		for rb.eng.Stats().Batches.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	ra := e.runEngine(oa)
	e.produce(e.values("v", 3, 1)...)
	select {
	case <-ra.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the older engine did not stop within 60s of the duplicate's join")
	}
	<-bDone
	var fe *FencedError
	if !errors.As(ra.res, &fe) {
		t.Errorf("the older engine's Run = %v, want a *FencedError", ra.res)
	}
	newerStillRuns(t, rb)
	eventually(t, "the newer engine delivering every w record", deliveredAll(b, "w", 3))
}

// The same takeover with the duplicate's InitProducerID landing between the
// older engine's TxnOffsetCommit (accepted: the duplicate had not joined
// yet) and its EndTxn, which kfake then answers INVALID_TXN_STATE: an End
// that fails without saying "fenced", after which the older engine's next
// Begin cannot start. The older engine rebuilt its session without asking
// the group whether its instance id had been taken, rejoined under it and
// fenced the newer one, which exited instead (seen in `kretry run` e2e
// runs: TestDuplicateStartsMidTransaction). Embedded only: it holds the
// EndTxn inside kfake, which Kafka offers no hook for.
func TestDuplicateFencingAnEndFencesTheOlder(t *testing.T) {
	if brokerKind != kafkatest.Embedded {
		t.Skip("holds a request inside kfake: embedded broker only")
	}
	c, e := newControlledEnv(t)
	a, b := newRecorder(), newRecorder()
	a.setAnswer(failing(map[string][]error{"v0": {e422}}))
	keyed := func(d *recorder) Options {
		o := e.staticOptions(d, "dup")
		o.Ordering, o.ParkingTopic = flow.OrderingKey, retrytopics.ParkingTopic("orders")
		return o
	}
	var (
		rb      atomic.Pointer[running]
		held    atomic.Bool
		bJoined = make(chan struct{})
		bInit   = make(chan struct{})
	)
	c.ControlKey(int16(kmsg.EndTxn), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.EndTxnRequest)
		// The older engine's End of the transaction that moves v0 to the
		// DLQ: start the duplicate and hold the EndTxn until the
		// duplicate has joined and its producer's InitProducerID has
		// aborted our transaction and bumped the epoch.
		if !req.Commit || len(a.callsForValue("v0")) == 0 || !held.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		go func() {
			r := e.runEngine(keyed(b))
			rb.Store(r)
			<-r.eng.Joined()
			close(bJoined)
		}()
		c.SleepControl(func() {
			<-bJoined
			<-bInit
		})
		return nil, nil, false
	})
	// kfake handles the duplicate's InitProducerID as soon as this returns,
	// before the held EndTxn resumes.
	var initOnce sync.Once
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if held.Load() {
			initOnce.Do(func() { close(bInit) })
		}
		return nil, nil, false
	})
	ra := e.runEngine(keyed(a))
	e.produce(e.values("v", 3, 1)...)
	select {
	case <-ra.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the older engine did not stop within 30s of the duplicate's join (EndTxn held: %v)", held.Load())
	}
	var fe *FencedError
	if !errors.As(ra.res, &fe) {
		t.Errorf("the older engine's Run = %v, want a *FencedError", ra.res)
	}
	if ra.res != nil && strings.Contains(ra.res.Error(), "invalid attempt") {
		t.Errorf("the older engine's error names the producer's state machine, not the broker's answer: %v", ra.res)
	}
	r := rb.Load()
	if r == nil {
		t.Fatal("the duplicate never started")
	}
	newerStillRuns(t, r)
	e.produce(e.values("w", 3, 1)...)
	eventually(t, "the newer engine delivering every w record", deliveredAll(b, "w", 3))
}

// An engine stopped while its first JoinGroup is under way (SIGTERM in the
// first seconds of `kretry run`, before the first assignment): the group
// client's Close waits for that join to finish, so the engine has a member
// id by then, and its static member must leave. It read the member id
// before Close ("" while joining) and so left nothing: the member stayed,
// was given partitions by the next assignment and held them for the session
// timeout (30s here, 45s by default), and the next member's JoinGroup waited
// for it to rejoin.
func TestStopWhileJoiningLeavesTheGroup(t *testing.T) {
	e := newEnv(t, 2)
	a, b := newRecorder(), newRecorder()
	ra := e.runEngine(e.staticOptions(a, "pod-a"))
	select {
	case <-ra.eng.Joined():
	case <-time.After(30 * time.Second):
		t.Fatal("a did not join within 30s")
	}
	// b's JoinGroup waits for a's rejoin (a heartbeats every second): b
	// is stopped while it waits.
	eb, err := New(context.Background(), e.staticOptions(b, "pod-b"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- eb.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("b's Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("b did not stop within 30s")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		gs, err := e.adm.DescribeGroups(context.Background(), e.group())
		if err != nil {
			t.Fatal(err)
		}
		ghost := false
		for _, m := range gs[e.group()].Members {
			ghost = ghost || (m.InstanceID != nil && *m.InstanceID == "pod-b")
		}
		if !ghost {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after b stopped, its static member (instance id pod-b) is still in the group (state %s)", gs[e.group()].State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// a owns every partition again at once.
	e.produce(e.values("w", 2, 2)...)
	eventually(t, "a delivering both partitions", func() bool {
		return len(a.callsForValue("w0")) > 0 && len(a.callsForValue("w1")) > 0
	})
}
