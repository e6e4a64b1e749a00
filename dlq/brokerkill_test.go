package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/retrytopics"
)

// TestBrokerKilledDuringRedrive: three Kafka nodes (replication 3, min ISR
// 2); a redrive of 40 records at 10/s, and after its first commit the node
// leading the marks topic, the node leading a tier partition, or the
// transaction coordinator of kretry-dlq-<dlq> is killed with SIGKILL. The
// redrive completes or fails with an error saying to run it again; after
// the node is back a rerun moves the rest, and every record is on the tier
// exactly once, redriven by one redrive id, delivered to the app.
func TestBrokerKilledDuringRedrive(t *testing.T) {
	if brokerKind != kafkatest.Kafka {
		t.Skip("needs a three-node Apache Kafka cluster (runs in the real-Kafka pass); the embedded broker has one node: TestOnlyBrokerDownDuringRedrive")
	}
	cl := kafkatest.New(t, kafkatest.Config{Nodes: 3})
	for _, target := range []string{"marks-leader", "tier-leader", "txn-coordinator"} {
		t.Run(target, func(t *testing.T) {
			e := envOn(t, cl.Addrs(), 2, 50*time.Millisecond)
			c := e.client(dlq.WithLeaseTTL(10 * time.Second))
			const n = 40
			snap := deadLetter(t, e, c, n)
			node := 0
			res, err := redriveKilling(t, c, func() {
				node = nodeOf(t, e, target)
				t.Logf("killing node %d (%s)", node, target)
				if err := cl.Kill(node); err != nil {
					t.Fatal(err)
				}
			})
			t.Logf("the redrive with node %d killed: %+v, err %v", node, summary(res), err)
			if err != nil && !errors.Is(err, dlq.ErrFenced) && !strings.Contains(err.Error(), "run the same command again") {
				t.Errorf("the redrive failed with %v: want it to complete, or an error saying to run it again", err)
			}
			if err := cl.Restart(context.Background(), node); err != nil {
				t.Fatal(err)
			}
			rerun, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
			if err != nil {
				t.Fatalf("rerun: %v", err)
			}
			t.Logf("rerun moved %d", rerun.Moved)
			checkRedrivenOnce(t, e, c, snap)
		})
	}
}

// redriveKilling runs a redrive at 10 records/s and calls kill once, after
// its first commit.
func redriveKilling(t *testing.T, c *dlq.Client, kill func()) (*dlq.Result, error) {
	t.Helper()
	killed := false
	return c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: 10, By: "test", Progress: func(dlq.Progress) {
		if !killed {
			killed = true
			kill()
		}
	}})
}

func summary(r *dlq.Result) string {
	if r == nil {
		return "no result"
	}
	return fmt.Sprintf("selected %d, moved %d, stopped %v", r.Selected, r.Moved, r.Stopped)
}

// nodeOf is the node id of target: the leader of the marks topic, of the
// tier's partition 0, or the transaction coordinator of the DLQ's
// transactional id.
func nodeOf(t *testing.T, e *env, target string) int {
	t.Helper()
	ctx := context.Background()
	leader := func(topic string) int {
		tds, err := e.adm.ListTopics(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return int(tds[topic].Partitions[0].Leader)
	}
	switch target {
	case "marks-leader":
		return leader(dlq.MarksTopic(e.plan.DLQ))
	case "tier-leader":
		return leader(e.plan.Tiers[0].Topic)
	default:
		rs := e.adm.FindTxnCoordinators(ctx, dlq.TransactionalID(e.plan.DLQ))
		if err := rs.Error(); err != nil {
			t.Fatal(err)
		}
		return int(rs.Sorted()[0].NodeID)
	}
}

// checkRedrivenOnce checks that every record of snap is on the first tier
// exactly once as a redriven copy, that the app was delivered each with
// one redrive id only and acknowledged it, and that none is waiting.
func checkRedrivenOnce(t *testing.T, e *env, c *dlq.Client, snap *dlq.Snapshot) {
	t.Helper()
	for _, en := range snap.Entries {
		eventually(t, en.ID+" acknowledged", func() bool { return e.app.ackedCount(en.ID) >= 1 })
	}
	seen := map[string]int{}
	for _, r := range readAll(t, e, e.plan.Tiers[0].Topic) {
		if o, err := retrytopics.ReadOrigin(r, false, 0); err == nil && o.Redrives == 1 && o.Attempts == 0 {
			seen[o.ID()]++
		}
	}
	ids := map[string]map[string]int{} // ce-id → redrive id → deliveries
	for _, m := range e.app.redriven() {
		if ids[m.ID] == nil {
			ids[m.ID] = map[string]int{}
		}
		ids[m.ID][m.RedriveID]++
	}
	for _, en := range snap.Entries {
		if seen[en.ID] != 1 || len(ids[en.ID]) != 1 {
			t.Errorf("%s: %d copies on the tier, delivered under redrive ids %v; want 1 copy, 1 redrive id", en.ID, seen[en.ID], ids[en.ID])
		}
		for id, k := range ids[en.ID] {
			if k > 1 {
				t.Logf("%s delivered %d times under %s (the engine redelivers after a failed commit: at least once)", en.ID, k, id)
			}
		}
	}
	if st := dlq.StatsOf(mustRead(t, c).Entries); st.Waiting != 0 || st.Redriven != len(snap.Entries) {
		t.Errorf("stats %+v, want 0 waiting, %d redriven", st, len(snap.Entries))
	}
}

// TestOnlyBrokerDownDuringRedrive: the only broker (Kafka: one node killed
// with SIGKILL; embedded: the broker closed, its data kept) goes down after
// a redrive's first commit and stays down until the redrive returns. The
// redrive must return, with an error saying to run it again, not hang; once
// the broker is back the rerun moves the rest, each record exactly once.
func TestOnlyBrokerDownDuringRedrive(t *testing.T) {
	addrs, kill, back := restartableBroker(t)
	e := envOn(t, addrs, 2, 50*time.Millisecond)
	c := e.client(dlq.WithLeaseTTL(10 * time.Second))
	const n = 20
	// The engine joins with the default group.instance.id (the host's
	// name, as kretry run's): the engine whose transaction fails in the
	// outage starts a new session, which takes the partitions back as soon
	// as the broker returns. A dynamic member would wait until Kafka drops
	// the old one at its session timeout (45s), longer than the wait below.
	snap := deadLetterWith(t, e, c, n, e.run)
	start := time.Now()
	type ended struct {
		res *dlq.Result
		err error
	}
	done := make(chan ended, 1)
	go func() {
		res, err := redriveKilling(t, c, kill)
		done <- ended{res, err}
	}()
	var end ended
	select {
	case end = <-done:
	case <-time.After(2 * time.Minute):
		t.Errorf("the redrive did not return within 2 minutes of the broker going down (nor could Ctrl-C stop it: its commit ignores the context)")
		back()
		end = <-done
		back = func() {}
	}
	res, err := end.res, end.err
	t.Logf("the redrive with the broker down: %s, err %v, after %v", summary(res), err, time.Since(start).Round(time.Millisecond))
	if err == nil && (res == nil || res.Moved != n) {
		t.Errorf("the redrive returned no error after moving %s: want an error when records are left", summary(res))
	}
	if err != nil && !strings.Contains(err.Error(), "run the same command again") {
		t.Errorf("the redrive failed with %v: want an error saying to run it again", err)
	}
	back()
	var rerun *dlq.Result
	eventually(t, "a rerun once the broker is back", func() bool {
		rerun, err = c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
		if err != nil {
			t.Logf("rerun: %v", err)
		}
		return err == nil
	})
	t.Logf("rerun moved %d", rerun.Moved)
	checkRedrivenOnce(t, e, c, snap)
}

// restartableBroker is a broker of the selected kind that kill stops
// (Kafka: SIGKILL of its one node; embedded: closed, data kept) and back
// starts again on the same address and data.
func restartableBroker(t *testing.T) (addrs []string, kill, back func()) {
	t.Helper()
	if brokerKind == kafkatest.Kafka {
		c := kafkatest.New(t, kafkatest.Config{})
		return c.Addrs(), func() {
				if err := c.Kill(1); err != nil {
					t.Error(err)
				}
			}, func() {
				if err := c.Restart(context.Background(), 1); err != nil {
					t.Fatal(err)
				}
			}
	}
	cfg := broker.Config{Listen: freeAddr(t), Partitions: 2, DataDir: t.TempDir(),
		Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}}
	var b *broker.Broker
	start := func() {
		var err error
		if b, err = broker.Start(cfg); err != nil {
			t.Fatal(err)
		}
	}
	start()
	t.Cleanup(func() { b.Close() })
	return b.Addrs(), func() { b.Close() }, start
}

// freeAddr is a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestBrokerKilledMidTransaction: three Kafka nodes; the node that receives
// a redrive's first transactional Produce, or its first EndTxn (the
// transaction coordinator of kretry-dlq-<dlq>), is killed with SIGKILL the
// moment the request is written, before it answers. The redrive completes
// or fails saying to run it again; after the node is back a rerun moves
// the rest, and every record is on the tier exactly once.
func TestBrokerKilledMidTransaction(t *testing.T) {
	if brokerKind != kafkatest.Kafka {
		t.Skip("needs a three-node Apache Kafka cluster (runs in the real-Kafka pass)")
	}
	cl := kafkatest.New(t, kafkatest.Config{Nodes: 3})
	for _, at := range []struct {
		name string
		key  int16
	}{{"produce", kmsg.Produce.Int16()}, {"end-txn", kmsg.EndTxn.Int16()}} {
		t.Run(at.name, func(t *testing.T) {
			e := envOn(t, cl.Addrs(), 2, 50*time.Millisecond)
			h := &killOnWrite{key: at.key, kill: func(node int32) {
				t.Logf("killing node %d as the %s request is written to it", node, at.name)
				if err := cl.Kill(int(node)); err != nil {
					t.Error(err)
				}
			}}
			c, err := dlq.New(e.topic(), []kgo.Opt{kgo.SeedBrokers(cl.Addrs()...), kgo.WithHooks(h)},
				dlq.WithLogger(testLogger(t)), dlq.WithLeaseTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			const n = 30
			snap := deadLetter(t, e, c, n)
			res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: 20, By: "test",
				Started: func(*dlq.Result) { h.armed.Store(true) }})
			t.Logf("the redrive: %s, err %v", summary(res), err)
			if err != nil && !strings.Contains(err.Error(), "run the same command again") {
				t.Errorf("the redrive failed with %v: want it to complete, or an error saying to run it again", err)
			}
			node := h.node.Load()
			if node == 0 {
				t.Fatalf("no %s request was written after the start", at.name)
			}
			if err := cl.Restart(context.Background(), int(node)); err != nil {
				t.Fatal(err)
			}
			rerun, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
			if err != nil {
				t.Fatalf("rerun: %v", err)
			}
			t.Logf("rerun moved %d", rerun.Moved)
			checkRedrivenOnce(t, e, c, snap)
		})
	}
}

// killOnWrite kills, once armed, the node the first request with key is
// written to, before that request is answered.
type killOnWrite struct {
	key   int16
	kill  func(node int32)
	armed atomic.Bool
	node  atomic.Int32
}

func (h *killOnWrite) OnBrokerWrite(meta kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && key == h.key && h.armed.Load() && meta.NodeID >= 0 && h.node.CompareAndSwap(0, meta.NodeID) {
		h.kill(meta.NodeID)
	}
}
