package engine

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// An orphaned member under our instance id (a JoinGroup whose answer was
// lost in a broker outage) fences our member exactly as a twin would. After
// broker trouble the engine rejoins and goes on delivering; without it, the
// same signal stops Run with the FencedError (see orphan.go).
func TestOwnOrphanAfterBrokerTroubleRejoins(t *testing.T) {
	e := newEnv(t, 1)
	a := newRecorder()
	r := e.runEngine(e.staticOptions(a, "orphan"))
	t.Cleanup(r.cancel)
	e.produce(e.values("v", 2, 1)...)
	eventually(t, "the first records delivered", func() bool { return len(a.callsForValue("v1")) > 0 })

	r.eng.trouble.last.Store(time.Now().UnixNano()) // a broker outage, just now
	e.joinAsOrphan("orphan")
	e.produce(e.values("w", 2, 1)...)
	eventually(t, "a record produced after the orphan's join delivered", func() bool { return len(a.callsForValue("w1")) > 0 })
	if done, err := r.stopped(); done {
		t.Fatalf("Run returned after broker trouble and an orphan: %v", err)
	}
}

func TestTakeoverWithoutBrokerTroubleStops(t *testing.T) {
	e := newEnv(t, 1)
	a := newRecorder()
	r := e.runEngine(e.staticOptions(a, "twin"))
	t.Cleanup(r.cancel)
	e.produce(e.values("v", 2, 1)...)
	eventually(t, "the first records delivered", func() bool { return len(a.callsForValue("v1")) > 0 })

	e.joinAsOrphan("twin")
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop within 30s of another member taking its instance id")
	}
	var fe *FencedError
	if !errors.As(r.res, &fe) {
		t.Fatalf("Run = %v, want a *FencedError", r.res)
	}
}

// joinAsOrphan registers instance in the env's group under a new member id,
// with the protocol its current holder joined with, as a JoinGroup whose
// answer was lost does (or a twin's first join), and never heartbeats.
func (e *env) joinAsOrphan(instance string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gs, err := e.adm.DescribeGroups(ctx, e.group())
	if err != nil {
		e.t.Fatal(err)
	}
	g := gs[e.group()]
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.InstanceID, req.ProtocolType = e.group(), &instance, g.ProtocolType
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 30_000, 30_000
	for _, m := range g.Members {
		if m.InstanceID == nil || *m.InstanceID != instance {
			continue
		}
		meta, ok := m.Join.AsConsumer()
		if !ok {
			e.t.Fatalf("member %s joined without consumer metadata", m.MemberID)
		}
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = g.Protocol, meta.AppendTo(nil)
		req.Protocols = append(req.Protocols, p)
	}
	if len(req.Protocols) == 0 {
		e.t.Fatalf("group %s has no member with instance id %q: %+v", e.group(), instance, g.Members)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ClientID("orphan-maker"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		e.t.Fatalf("the orphan's JoinGroup: %v", err)
	}
	e.t.Logf("orphan member %s holds instance id %q", resp.MemberID, instance)
}

func TestBrokerTroubleIsRecorded(t *testing.T) {
	var b brokerTrouble
	now := time.Now()
	if _, ok := b.since(now); ok {
		t.Fatal("trouble before any")
	}
	b.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.Fetch), kgo.BrokerE2E{ReadErr: errors.New("EOF")})
	b.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.JoinGroup), kgo.BrokerE2E{ReadErr: context.Canceled})
	b.OnBrokerConnect(kgo.BrokerMetadata{}, 0, nil, nil)
	if _, ok := b.since(now); ok {
		t.Fatal("a fetch's read error, a cancelled join or a good dial counted as trouble")
	}
	b.OnBrokerE2E(kgo.BrokerMetadata{}, int16(kmsg.JoinGroup), kgo.BrokerE2E{ReadErr: errors.New("EOF")})
	if _, ok := b.since(time.Now()); !ok {
		t.Fatal("a JoinGroup whose answer was lost is not trouble")
	}
	var c brokerTrouble
	c.OnBrokerConnect(kgo.BrokerMetadata{}, 0, nil, &net.OpError{Op: "dial", Err: errors.New("connection refused")})
	if _, ok := c.since(time.Now()); !ok {
		t.Fatal("a refused dial is not trouble")
	}
}

// Kafka gives a replaced static member's new member id to a copy of the old
// member: the group keeps listing the old client id, so a client id cannot
// tell our own member from a twin's (orphan.go; the embedded broker's third
// fix, internal/thirdparty/kfake/README.md).
func TestStaticReplacementKeepsTheClientID(t *testing.T) {
	e := newEnv(t, 1)
	a := newRecorder()
	o := e.staticOptions(a, "cid")
	o.ClientOpts = append(o.ClientOpts, kgo.ClientID("first-holder"))
	r := e.runEngine(o)
	t.Cleanup(r.cancel)
	e.produce(e.values("v", 1, 1)...)
	eventually(t, "the first record delivered", func() bool { return len(a.callsForValue("v0")) > 0 })
	e.joinAsOrphan("cid") // from client id "orphan-maker"
	gs, err := e.adm.DescribeGroups(context.Background(), e.group())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range gs[e.group()].Members {
		if m.InstanceID != nil && *m.InstanceID == "cid" && m.ClientID != "first-holder" {
			t.Errorf("after the replacement member %s lists client id %q, want the old member's %q", m.MemberID, m.ClientID, "first-holder")
		}
	}
}
