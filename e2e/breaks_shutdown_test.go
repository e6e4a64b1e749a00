package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/check"
	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// TestSigtermWhileStarting: SIGTERM at any moment of the start (checking
// the broker, creating the topics, joining the group, before the first
// assignment) is a clean stop: exit 0 within a few seconds, with no error
// line.
func TestSigtermWhileStarting(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	app := startStampApp(t)
	for i, after := range []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond} {
		cfg := identityConfig(t, addr, app.url())
		p := startKretryEnv(t, fmt.Sprintf("run#%d", i), []string{fmt.Sprintf("KRETRY_KAFKA__INSTANCE_ID=start-%d", i)}, "run", "-c", cfg)
		// Until its first log line the process may not have its signal
		// handlers yet: a SIGTERM then ends it by the default action
		// (nothing started, nothing to lose). Count from that line.
		waitFor(t, 30*time.Second, "kretry starting", func() bool { return strings.Contains(p.stderr.String(), "kretry starting") }, func() { p.mustRun(t) })
		time.Sleep(after)
		start := time.Now()
		code := p.stop(t, 30*time.Second)
		took := time.Since(start)
		errLines := 0
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(l, "level=ERROR") {
				errLines++
			}
		}
		t.Logf("SIGTERM %v after the start: exit %d after %v", after, code, took.Round(time.Millisecond))
		if code != 0 || errLines > 0 {
			t.Errorf("SIGTERM %v after the start: exit %d, %d error lines, want 0 and none:\n%s", after, code, errLines, p.stderr.String())
		}
		if took > 10*time.Second {
			t.Errorf("SIGTERM %v after the start: the exit took %v", after, took)
		}
	}
}

// TestSigtermWhileJoiningLeavesNoGhost: a second instance (its own
// kafka.instance_id) gets SIGTERM while its JoinGroup is under way (the
// first seconds, before its first assignment). Its static member must not
// stay in the group: a member that joined and is then never heard of again
// is given partitions by the next assignment and holds them until the
// session timeout (45s by default), during which their records wait.
func TestSigtermWhileJoiningLeavesNoGhost(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 4)
	app := startStampApp(t)
	cfg := identityConfig(t, addr, app.url())
	cl := newClient(t, addr)
	a := startKretryEnv(t, "a", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-a"}, "run", "-c", cfg)
	produceValues(t, cl, seq("a", 8)...)
	app.waitAcked(t, 60*time.Second, seq("a", 8), func() { a.mustRun(t) })
	for i, after := range []time.Duration{0, 20 * time.Millisecond, 60 * time.Millisecond, 100 * time.Millisecond, 140 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond} {
		b := startKretryEnv(t, fmt.Sprintf("b#%d", i), []string{"KRETRY_KAFKA__INSTANCE_ID=pod-b"}, "run", "-c", cfg)
		// Count from the first log line: before it the signal handlers may
		// not be installed (see TestSigtermWhileStarting).
		waitFor(t, 30*time.Second, "kretry starting", func() bool { return strings.Contains(b.stderr.String(), "kretry starting") }, func() { b.mustRun(t) })
		time.Sleep(after)
		if code := b.stop(t, 30*time.Second); code != 0 {
			t.Errorf("b#%d exited %d after SIGTERM, want 0", i, code)
		}
		joined := strings.Contains(b.stderr.String(), `msg="partitions assigned"`)
		stop := time.Now()
		vs := seq(fmt.Sprintf("b%d-", i), 8)
		produceValues(t, cl, vs...)
		last := app.waitAcked(t, 90*time.Second, vs, func() { a.mustRun(t) })
		took := last.Sub(stop)
		t.Logf("broker %s: SIGTERM %v after b's first log line (b assigned before it: %v); a delivered every partition %v after b's exit",
			brokerKind, after, joined, took.Round(time.Millisecond))
		if took > 15*time.Second {
			t.Errorf("SIGTERM %v after b's first log line: records waited %v: b's static member stayed in the group after its exit (session timeout 45s)", after, took.Round(time.Millisecond))
		}
	}
}

// ledgerRun is one source topic "orders", an app whose answers depend on
// the record number (n%10 == 0: 422, the DLQ; n%10 == 1: 503 once; the
// rest 200) and a ledger of what became of every record.
type ledgerRun struct {
	t        *testing.T
	addrs    []string // kretry's seed brokers
	admin    string   // where the test produces and reads
	app      *testApp
	ledger   *check.Ledger
	produced int
	hang     atomic.Bool // the app holds every delivery until released
	release  chan struct{}
}

func newLedgerRun(t *testing.T, addrs []string, partitions int32, rf int16) *ledgerRun {
	r := &ledgerRun{t: t, addrs: addrs, admin: addrs[0], ledger: check.NewLedger(), release: make(chan struct{})}
	createTopicRF(t, r.admin, "orders", partitions, rf)
	r.app = startApp(t, func(m *delivery.Message) answer {
		if r.hang.Load() {
			// A delivery that hung is one kretry gave up on (its timeout,
			// or the shutdown): its late answer is not read, so it must
			// not count as the record's acknowledgement. Counted, a
			// record whose last-tier attempt timed out in the hang was
			// both acknowledged and dead-lettered (Kafka, 8 of 600, in a
			// loaded run).
			<-r.release
			return answer{http.StatusServiceUnavailable, "released after hanging"}
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(string(m.Value), "rec-"))
		switch {
		case n%10 == 0:
			return answer{http.StatusUnprocessableEntity, "bad record"}
		case n%10 == 1 && m.Attempt == 1:
			return answer{http.StatusServiceUnavailable, "busy"}
		}
		r.ledger.Acked(m.ID)
		return answer{http.StatusOK, ""}
	})
	t.Cleanup(func() {
		select {
		case <-r.release:
		default:
			close(r.release)
		}
	})
	return r
}

// watchDLQ feeds the DLQ's committed records to the ledger; call it once
// the broker answers for good.
func (r *ledgerRun) watchDLQ() {
	readTopic(r.t, r.admin, retrytopics.DLQTopic("orders"), func(rec *kgo.Record) {
		if o, err := retrytopics.ReadOrigin(rec, false, 0); err == nil {
			r.ledger.DeadLettered(o.ID())
		}
	})
}

func (r *ledgerRun) config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafka:\n  brokers: [%s]\n  fetch_max_wait: 50ms\n  session_timeout: 6s\n", strings.Join(r.addrs, ", "))
	fmt.Fprintf(&b, "app:\n  url: %q\n  timeout: 5s\n", r.app.url())
	b.WriteString("metrics:\n  listen: \"\"\nlog:\n  level: info\ntopics:\n  - name: orders\n    retry:\n      tiers: [200ms]\n      jitter: 0\n")
	path := filepath.Join(r.t.TempDir(), "kretry.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		r.t.Fatal(err)
	}
	return path
}

func (r *ledgerRun) produce(n int) {
	cl := newClient(r.t, r.admin, kgo.RequiredAcks(kgo.AllISRAcks()))
	var rs []*kgo.Record
	for range n {
		rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "k-%d", r.produced%17), Value: fmt.Appendf(nil, "rec-%d", r.produced)})
		r.produced++
	}
	for _, id := range produceSync(r.t, cl, rs...) {
		r.ledger.Produced(id)
	}
}

func (r *ledgerRun) settledCount() int {
	c := r.ledger.Check()
	return c.Delivered + c.DeadLettered
}

// verify waits until every record is acknowledged or dead-lettered, and
// checks that none is in the DLQ twice or both acknowledged and
// dead-lettered.
func (r *ledgerRun) verify(alive func()) {
	r.t.Helper()
	waitFor(r.t, 90*time.Second, "every record acknowledged or dead-lettered", r.ledger.Settled, alive)
	if c := r.ledger.Check(); !c.OK() {
		r.t.Errorf("conservation: %+v", c)
	}
}

// sigtermWithin sends SIGTERM and reports the exit status and how long the
// exit took.
func sigtermWithin(t *testing.T, p *proc, bound time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	code := p.stop(t, bound+30*time.Second)
	took := time.Since(start)
	if took > bound {
		t.Errorf("%s: the exit after SIGTERM took %v, want at most %v", p.name, took.Round(time.Millisecond), bound)
	}
	return code, took
}

// TestSigtermWhileBrokerDown: the only broker is killed mid-stream, then
// kretry gets SIGTERM. It must exit within 30s (Kubernetes' default grace
// period) and lose nothing: once the broker is back a new instance settles
// every record, with no DLQ duplicate.
func TestSigtermWhileBrokerDown(t *testing.T) {
	t.Parallel()
	var (
		addr       string
		kill, back func()
	)
	if brokerKind == kafkatest.Kafka {
		c := kafkatest.New(t, kafkatest.Config{})
		addr = c.Addrs()[0]
		kill = func() {
			if err := c.Kill(1); err != nil {
				t.Fatal(err)
			}
		}
		back = func() {
			if err := c.Restart(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		addr = freeAddr(t)
		dir := filepath.Join(t.TempDir(), "data")
		var b *proc
		start := func() {
			b = startKretry(t, "broker", "broker", "--listen", addr, "--data-dir", dir)
			waitTCP(t, b, addr)
		}
		start()
		kill = func() { b.kill(t) }
		back = start
	}
	r := newLedgerRun(t, []string{addr}, 3, 1)
	cfg := r.config()
	run1 := startKretryEnv(t, "run#1", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-0"}, "run", "-c", cfg)
	r.produce(600)
	waitFor(t, 60*time.Second, "a third of the records settled", func() bool { return r.settledCount() > 200 }, func() { run1.mustRun(t) })
	kill()
	time.Sleep(500 * time.Millisecond)
	code, took := sigtermWithin(t, run1, 30*time.Second)
	t.Logf("broker %s: SIGTERM with the broker down: exit %d after %v", brokerKind, code, took.Round(time.Millisecond))
	back()
	r.watchDLQ()
	run2 := startKretryEnv(t, "run#2", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-0"}, "run", "-c", cfg)
	r.verify(func() { run2.mustRun(t) })
	if code, _ := sigtermWithin(t, run2, 20*time.Second); code != 0 {
		t.Errorf("run#2 exited %d after SIGTERM, want 0", code)
	}
}

// TestSigtermWhileTxnCoordinatorDown: three Kafka nodes; the node
// coordinating the instance's transactions is killed mid-stream while the
// app hangs every delivery (so the shutdown also waits out the grace, 5s);
// then SIGTERM. kretry must exit within 30s and lose nothing: after the
// node is back a new instance settles every record, no DLQ duplicate.
func TestSigtermWhileTxnCoordinatorDown(t *testing.T) {
	t.Parallel()
	if brokerKind != kafkatest.Kafka {
		t.Skip("needs a three-node Apache Kafka cluster: runs in the real-Kafka pass")
	}
	c := kafkatest.New(t, kafkatest.Config{Nodes: 3})
	r := newLedgerRun(t, c.Addrs(), 3, 3)
	cfg := r.config()
	run1 := startKretryEnv(t, "run#1", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-0"}, "run", "-c", cfg)
	r.produce(600)
	waitFor(t, 60*time.Second, "a third of the records settled", func() bool { return r.settledCount() > 200 }, func() { run1.mustRun(t) })
	id := sidecar.TransactionalID("kretry", "pod-0", "orders-kretry")
	rs := newAdmin(t, r.admin).FindTxnCoordinators(context.Background(), id)
	if err := rs.Error(); err != nil {
		t.Fatal(err)
	}
	node := int(rs.Sorted()[0].NodeID)
	r.hang.Store(true)
	if err := c.Kill(node); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	code, took := sigtermWithin(t, run1, 30*time.Second)
	t.Logf("SIGTERM with the transaction coordinator (node %d) down and the app hung: exit %d after %v", node, code, took.Round(time.Millisecond))
	r.hang.Store(false)
	close(r.release)
	if err := c.Restart(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	r.admin = c.Addrs()[0]
	r.watchDLQ()
	run2 := startKretryEnv(t, "run#2", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-0"}, "run", "-c", cfg)
	r.verify(func() { run2.mustRun(t) })
	if code, _ := sigtermWithin(t, run2, 20*time.Second); code != 0 {
		t.Errorf("run#2 exited %d after SIGTERM, want 0", code)
	}
}
