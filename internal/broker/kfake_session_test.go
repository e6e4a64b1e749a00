package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/internal/broker"
)

const (
	joinerSession = time.Second
	// joinerGroups is how many groups each strand one member. Unpatched
	// kfake loses the dead member's session in about half of them (57 of
	// 96 over six runs), so 16 groups all miss the defect with a
	// probability near 2^-16.
	joinerGroups = 16
)

// TestMemberKilledInJoinExpires reproduces the kfake defect named in the
// design brief's invariant 11 (issue 8): a member whose connection is gone by
// the time its JoinGroup is answered must still be expired by its session
// timeout, as Apache Kafka's coordinator does, and must not keep its
// partitions. The embedded broker runs internal/thirdparty/kfake, which
// fixes it (see its README.md).
//
// Each group has a live member and a joiner that is killed (its socket
// closed) while its JoinGroup is parked in the broker during a rebalance.
// The live member then rejoins, which completes the generation with both,
// and, as leader, syncs an assignment giving the dead member a partition:
// the group is Stable with a member that will never heartbeat. Unpatched
// kfake (v0.0.0-20260918054303-01f206a7e32c) arms the session timer only when the
// JoinGroup reply was written, and the leader's SyncGroup stops the only
// other timer (pending sync), so the dead member stays forever. Whether the
// write "fails" on a closed connection is itself a coin toss (the response
// channel is buffered and selected against the connection's done channel),
// hence many groups.
func TestMemberKilledInJoinExpires(t *testing.T) {
	b, err := broker.Start(broker.Config{
		Listen: "127.0.0.1:0",
		Opts:   []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	// The groups run at once, not as parallel subtests: -parallel (the
	// number of cores by default) would run them a few at a time.
	errs := make([]error, joinerGroups)
	var wg sync.WaitGroup
	for i := range joinerGroups {
		wg.Go(func() { errs[i] = killInJoin(b.Addrs()[0], adm, fmt.Sprintf("killed-in-join-%02d", i)) })
	}
	wg.Wait()
	var failed int
	for _, err := range errs {
		if err != nil {
			failed++
			t.Error(err)
		}
	}
	if failed > 0 {
		t.Logf("%d of %d groups kept a dead member", failed, joinerGroups)
	}
}

// killInJoin strands one dead member in group and returns an error unless
// the broker expires it.
func killInJoin(addr string, adm *kadm.Client, group string) error {
	live, err := dialRaw(addr, "live")
	if err != nil {
		return err
	}
	defer live.conn.Close()
	join := func(memberID string) (*kmsg.JoinGroupResponse, error) {
		resp, err := live.do(joinRequest(group, live.instance, memberID))
		if err != nil {
			return nil, err
		}
		j := resp.(*kmsg.JoinGroupResponse)
		if err := kerr.ErrorForCode(j.ErrorCode); err != nil {
			return nil, fmt.Errorf("%s: JoinGroup: %w", group, err)
		}
		return j, nil
	}

	// Generation 1: the live member alone, leading.
	j, err := join("")
	if err != nil {
		return err
	}
	liveID := j.MemberID
	if err := live.sync(group, j.Generation, liveID, map[string][]int32{liveID: {0, 1}}); err != nil {
		return err
	}

	// The joiner's JoinGroup parks until the live member rejoins; the live
	// member's heartbeat saying "rebalance in progress" shows the broker
	// took it.
	dead, err := dialRaw(addr, "dead")
	if err != nil {
		return err
	}
	defer dead.conn.Close()
	if err := dead.send(joinRequest(group, dead.instance, "")); err != nil {
		return err
	}
	if ok, err := live.heartbeatUntilRebalance(group, liveID, j.Generation, 5*time.Second); err != nil || !ok {
		return fmt.Errorf("%s: no rebalance after the second member's JoinGroup (heartbeat error %v)", group, err)
	}

	// kill -9: close the joiner's socket and wait for the broker to close
	// its end, so that the JoinGroup reply has no connection to go to.
	if err := dead.kill(); err != nil {
		return err
	}

	if j, err = join(liveID); err != nil {
		return err
	}
	var deadID string
	for _, m := range j.Members {
		if m.MemberID != liveID {
			deadID = m.MemberID
		}
	}
	if len(j.Members) != 2 || deadID == "" {
		return fmt.Errorf("%s: generation %d has members %v, want the live and the dead member", group, j.Generation, j.Members)
	}
	if err := live.sync(group, j.Generation, liveID, map[string][]int32{liveID: {0}, deadID: {1}}); err != nil {
		return err
	}
	synced := time.Now()

	// The dead member never heartbeats: its session must expire, which the
	// live member hears as a rebalance.
	ok, err := live.heartbeatUntilRebalance(group, liveID, j.Generation, 5*joinerSession)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s: dead member %s not expired %v after the leader's SyncGroup (session timeout %v): %s",
			group, deadID, time.Since(synced).Round(time.Millisecond), joinerSession, describe(adm, group))
	}
	if j, err = join(liveID); err != nil {
		return err
	}
	if len(j.Members) != 1 {
		return fmt.Errorf("%s: generation %d after the expiry has members %v, want only %s", group, j.Generation, j.Members, liveID)
	}
	if err := live.sync(group, j.Generation, liveID, map[string][]int32{liveID: {0, 1}}); err != nil {
		return err
	}
	if got, want := describe(adm, group), "Stable: live[0 1]"; got != want {
		return fmt.Errorf("%s: described as %q, want %q", group, got, want)
	}
	return nil
}

// describe renders a group as "State: instance[partitions] …".
func describe(adm *kadm.Client, group string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gs, err := adm.DescribeGroups(ctx, group)
	if err == nil {
		err = gs[group].Err
	}
	if err != nil {
		return "DescribeGroups: " + err.Error()
	}
	g := gs[group]
	var ms []string
	for _, m := range g.Members {
		var parts []int32
		if c, ok := m.Assigned.AsConsumer(); ok {
			for _, tp := range c.Topics {
				parts = append(parts, tp.Partitions...)
			}
		}
		slices.Sort(parts)
		name := m.MemberID
		if m.InstanceID != nil {
			name = *m.InstanceID
		}
		ms = append(ms, fmt.Sprintf("%s%v", name, parts))
	}
	slices.Sort(ms)
	return g.State + ": " + strings.Join(ms, " ")
}

func joinRequest(group, instance, memberID string) *kmsg.JoinGroupRequest {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{"orders"}
	req := kmsg.NewPtrJoinGroupRequest()
	req.Version = 5 // static membership (KIP-345), not yet flexible
	req.Group = group
	req.SessionTimeoutMillis = int32(joinerSession / time.Millisecond)
	req.RebalanceTimeoutMillis = 5000
	req.MemberID = memberID
	req.InstanceID = &instance
	req.ProtocolType = "consumer"
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta.AppendTo(nil)}}
	return req
}

// rawConn is one group member speaking the Kafka protocol over a connection
// of its own, so that a test can close it at a chosen moment. It uses only
// non-flexible request versions. Every read and write has a deadline.
type rawConn struct {
	instance string // group.instance.id and client id
	conn     *net.TCPConn
	f        *kmsg.RequestFormatter
	corr     int32
	reqs     map[int32]kmsg.Request
}

func dialRaw(addr, instance string) (*rawConn, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{
		instance: instance,
		conn:     conn.(*net.TCPConn),
		f:        kmsg.NewRequestFormatter(kmsg.FormatterClientID(instance)),
		reqs:     map[int32]kmsg.Request{},
	}, nil
}

func (c *rawConn) send(req kmsg.Request) error {
	if req.IsFlexible() {
		return fmt.Errorf("rawConn: %T v%d is flexible", req, req.GetVersion())
	}
	c.corr++
	c.reqs[c.corr] = req
	c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(c.f.AppendRequest(nil, req, c.corr)); err != nil {
		return fmt.Errorf("%s: write %T: %w", c.instance, req, err)
	}
	return nil
}

func (c *rawConn) recv() (kmsg.Response, error) {
	c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var head [8]byte // size, correlation id
	if _, err := io.ReadFull(c.conn, head[:]); err != nil {
		return nil, fmt.Errorf("%s: read response: %w", c.instance, err)
	}
	body := make([]byte, binary.BigEndian.Uint32(head[:4])-4)
	if _, err := io.ReadFull(c.conn, body); err != nil {
		return nil, fmt.Errorf("%s: read response: %w", c.instance, err)
	}
	corr := int32(binary.BigEndian.Uint32(head[4:]))
	req, ok := c.reqs[corr]
	if !ok {
		return nil, fmt.Errorf("%s: response to unknown correlation id %d", c.instance, corr)
	}
	delete(c.reqs, corr)
	resp := req.ResponseKind()
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%s: decode %T: %w", c.instance, resp, err)
	}
	return resp, nil
}

func (c *rawConn) do(req kmsg.Request) (kmsg.Response, error) {
	if err := c.send(req); err != nil {
		return nil, err
	}
	return c.recv()
}

// kill closes the connection as a killed process does and returns once the
// broker has closed its end too: from then on, nothing it sends on this
// connection reaches anyone.
func (c *rawConn) kill() error {
	if err := c.conn.CloseWrite(); err != nil {
		return err
	}
	c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.Copy(io.Discard, c.conn); err != nil || n != 0 {
		return fmt.Errorf("%s: broker did not close the killed connection (read %d bytes): %v", c.instance, n, err)
	}
	return c.conn.Close()
}

func (c *rawConn) sync(group string, gen int32, memberID string, plan map[string][]int32) error {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Version = 3
	req.Group = group
	req.Generation = gen
	req.MemberID = memberID
	req.InstanceID = &c.instance
	for id, parts := range plan {
		a := kmsg.NewConsumerMemberAssignment()
		a.Topics = []kmsg.ConsumerMemberAssignmentTopic{{Topic: "orders", Partitions: parts}}
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: id, MemberAssignment: a.AppendTo(nil)})
	}
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	if err := kerr.ErrorForCode(resp.(*kmsg.SyncGroupResponse).ErrorCode); err != nil {
		return fmt.Errorf("%s: SyncGroup generation %d: %w", group, gen, err)
	}
	return nil
}

// heartbeatUntilRebalance heartbeats every tenth of the session timeout, as
// a client does, until the broker answers REBALANCE_IN_PROGRESS (true) or
// within has passed (false).
func (c *rawConn) heartbeatUntilRebalance(group, memberID string, gen int32, within time.Duration) (bool, error) {
	deadline := time.Now().Add(within)
	for {
		req := kmsg.NewPtrHeartbeatRequest()
		req.Version = 3
		req.Group = group
		req.Generation = gen
		req.MemberID = memberID
		req.InstanceID = &c.instance
		resp, err := c.do(req)
		if err != nil {
			return false, err
		}
		err = kerr.ErrorForCode(resp.(*kmsg.HeartbeatResponse).ErrorCode)
		switch {
		case errors.Is(err, kerr.RebalanceInProgress):
			return true, nil
		case err != nil:
			return false, fmt.Errorf("%s: heartbeat: %w", group, err)
		case time.Now().After(deadline):
			return false, nil
		}
		time.Sleep(joinerSession / 10)
	}
}
