package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// steadyProducer writes a few records every 20ms until stopped, so that
// the instance owning the partitions is nearly always inside a
// transaction; values() are the values written.
type steadyProducer struct {
	mu   sync.Mutex
	vals []string
	stop chan struct{}
	done chan struct{}
}

func startSteadyProducer(t *testing.T, cl *kgo.Client, prefix string) *steadyProducer {
	p := &steadyProducer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var vs []string
			for j := range 3 {
				vs = append(vs, fmt.Sprintf("k%d-%s%d", j, prefix, i*3+j))
			}
			produceValues(t, cl, vs...)
			p.mu.Lock()
			p.vals = append(p.vals, vs...)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *steadyProducer) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}

func (p *steadyProducer) values() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.vals...)
}

// fencedLine reports whether a process's stderr has the fenced error.
func fencedLine(p *proc) bool {
	return strings.Contains(p.stderr.String(), "took over") && strings.Contains(p.stderr.String(), "KRETRY_KAFKA__INSTANCE_ID")
}

// TestSameInstanceIDStartedTogether: two `kretry run` with one
// kafka.instance_id started at the same moment. Exactly one of them must
// stop (exit 1 naming the id); the other must go on and deliver every
// record. Both stopping — each fencing the other in turn — leaves the
// group without a consumer.
func TestSameInstanceIDStartedTogether(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	app := startStampApp(t)
	cfg := identityConfig(t, addr, app.url())
	cl := newClient(t, addr)
	env := []string{"KRETRY_KAFKA__INSTANCE_ID=twin"}
	a := startKretryEnv(t, "a", env, "run", "-c", cfg)
	b := startKretryEnv(t, "b", env, "run", "-c", cfg)
	prod := startSteadyProducer(t, cl, "s")
	waitFor(t, 60*time.Second, "one of the two to exit", func() bool { return a.exited() || b.exited() })
	time.Sleep(10 * time.Second) // time for a ping-pong, if any
	prod.halt()
	if a.exited() && b.exited() {
		t.Fatalf("both instances exited (a %d, b %d): each fenced the other; nothing consumes the group", a.cmd.ProcessState.ExitCode(), b.cmd.ProcessState.ExitCode())
	}
	gone, live := a, b
	if b.exited() {
		gone, live = b, a
	}
	if code := gone.cmd.ProcessState.ExitCode(); code != 1 || !fencedLine(gone) {
		t.Errorf("%s exited %d, want 1 with the line naming the instance id", gone.name, code)
	}
	app.waitAcked(t, 60*time.Second, prod.values(), func() { live.mustRun(t) })
	if code := live.stop(t, 20*time.Second); code != 0 {
		t.Errorf("%s exited %d after SIGTERM, want 0", live.name, code)
	}
}

// TestDuplicateStartsMidTransaction: a second `kretry run` with the first
// one's kafka.instance_id starts while the first is nearly always inside a
// transaction (steady traffic). Its producer fences the first one's
// open transaction; the first must stop and the newer go on delivering
// everything (README: "the older one logs one line ... and exits 1").
func TestDuplicateStartsMidTransaction(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	app := startStampApp(t)
	cfg := identityConfig(t, addr, app.url())
	cl := newClient(t, addr)
	env := []string{"KRETRY_KAFKA__INSTANCE_ID=dup"}
	first := startKretryEnv(t, "first", env, "run", "-c", cfg)
	prod := startSteadyProducer(t, cl, "s")
	waitFor(t, 60*time.Second, "the first instance delivering", func() bool {
		vs := prod.values()
		return len(vs) > 30 && !app.when(vs[30]).IsZero()
	}, func() { first.mustRun(t) })
	second := startKretryEnv(t, "second", env, "run", "-c", cfg)
	waitFor(t, 60*time.Second, "one of the two to exit", func() bool { return first.exited() || second.exited() })
	time.Sleep(10 * time.Second)
	prod.halt()
	if first.exited() && second.exited() {
		t.Fatalf("both instances exited (first %d, second %d)", first.cmd.ProcessState.ExitCode(), second.cmd.ProcessState.ExitCode())
	}
	if second.exited() {
		t.Errorf("the newer instance exited %d and the older one went on: want the older one fenced", second.cmd.ProcessState.ExitCode())
		app.waitAcked(t, 60*time.Second, prod.values(), func() { first.mustRun(t) })
		return
	}
	if code := first.cmd.ProcessState.ExitCode(); code != 1 || !fencedLine(first) {
		t.Errorf("the older instance exited %d, want 1 with the line naming the instance id", code)
	}
	app.waitAcked(t, 60*time.Second, prod.values(), func() { second.mustRun(t) })
	if code := second.stop(t, 20*time.Second); code != 0 {
		t.Errorf("the newer instance exited %d after SIGTERM, want 0", code)
	}
}

// TestInstanceIDEdges: instance ids that kretry validate accepts — the
// longest one (200 characters) made of every allowed character, and the
// shortest odd ones — work as the consumer's group.instance.id and inside
// the transactional id: the record is delivered and SIGTERM is a clean
// stop.
func TestInstanceIDEdges(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 1)
	app := startStampApp(t)
	cl := newClient(t, addr)
	all := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
	long := strings.Repeat(all, 4)[:200]
	for i, id := range []string{long, ".", "..", "-", "_"} {
		cfg := identityConfig(t, addr, app.url())
		p := startKretryEnv(t, fmt.Sprintf("id#%d", i), []string{"KRETRY_KAFKA__INSTANCE_ID=" + id}, "run", "-c", cfg)
		v := fmt.Sprintf("k-edge%d", i)
		produceValues(t, cl, v)
		app.waitAcked(t, 60*time.Second, []string{v}, func() { p.mustRun(t) })
		if code := p.stop(t, 20*time.Second); code != 0 {
			t.Errorf("instance id %q: exit %d after SIGTERM, want 0", id, code)
		}
	}
}

// TestKillThenRestartUnderAnotherID: kill -9 of `kretry run`, then a new
// instance under a different kafka.instance_id (a Deployment's pod replaced
// by one with another name). The dead static member keeps its partitions
// until its session timeout (6s here) and then expires; the new instance
// then delivers everything, the records the dead one had in flight
// included, and a record waiting in a tier is not lost.
func TestKillThenRestartUnderAnotherID(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	app := startStampApp(t, "h-head")
	cfg := identityConfig(t, addr, app.url(), "  session_timeout: 6s\n")
	cl := newClient(t, addr)
	old := startKretryEnv(t, "old", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-old"}, "run", "-c", cfg)
	produceValues(t, cl, seq("a", 6)...)
	app.waitAcked(t, 60*time.Second, seq("a", 6), func() { old.mustRun(t) })
	produceValues(t, cl, "h-head", "h-next")
	prod := startSteadyProducer(t, cl, "s")
	time.Sleep(300 * time.Millisecond)
	old.kill(t)
	killed := time.Now()
	next := startKretryEnv(t, "new", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-new"}, "run", "-c", cfg)
	time.Sleep(2 * time.Second)
	prod.halt()
	vs := append(prod.values(), "h-head", "h-next")
	last := app.waitAcked(t, 90*time.Second, vs, func() { next.mustRun(t) })
	t.Logf("broker %s: the instance under another id delivered everything %v after the kill (session timeout 6s)", brokerKind, last.Sub(killed).Round(time.Millisecond))
	if app.when("h-next").Before(app.when("h-head")) {
		t.Errorf("h-next acknowledged before its key's head")
	}
	if code := next.stop(t, 20*time.Second); code != 0 {
		t.Errorf("the new instance exited %d after SIGTERM, want 0", code)
	}
}

// TestDuplicateOfATwoTopicProcess: `kretry run` with two topics, and a
// duplicate with the same kafka.instance_id and config. The older process
// stops (exit 1) when its first engine is fenced, which stops its other
// engine cleanly; that engine's leave must not remove the duplicate's
// static member of its group: the duplicate goes on delivering both topics
// without losing its members.
func TestDuplicateOfATwoTopicProcess(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 2)
	createTopic(t, addr, "events", 2)
	app := startStampApp(t)
	cfg := identityConfig(t, addr, app.url())
	b, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	two := strings.Replace(string(b), "topics:\n", "topics:\n  - name: events\n    retry: {tiers: [2s], jitter: 0}\n", 1)
	if err := os.WriteFile(cfg, []byte(two), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := newClient(t, addr)
	env := []string{"KRETRY_KAFKA__INSTANCE_ID=dup2"}
	first := startKretryEnv(t, "first", env, "run", "-c", cfg)
	produceValues(t, cl, seq("a", 4)...)
	app.waitAcked(t, 60*time.Second, seq("a", 4), func() { first.mustRun(t) })
	second := startKretryEnv(t, "second", env, "run", "-c", cfg)
	code := first.wait(t, 60*time.Second)
	if code != 1 || !fencedLine(first) {
		t.Errorf("the older process exited %d, want 1 with the fenced line", code)
	}
	time.Sleep(3 * time.Second)
	adm := newAdmin(t, addr)
	for _, g := range []string{"orders-kretry", "events-kretry"} {
		gs, err := adm.DescribeGroups(context.Background(), g)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range gs[g].Members {
			if m.InstanceID != nil && *m.InstanceID == "dup2" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("group %s has %d members with instance id dup2 after the older process stopped, want the duplicate's one", g, n)
		}
	}
	var evs []*kgo.Record
	for i := range 4 {
		evs = append(evs, &kgo.Record{Topic: "events", Key: fmt.Appendf(nil, "e%d", i), Value: fmt.Appendf(nil, "ev-%d", i)})
	}
	produceSync(t, cl, evs...)
	produceValues(t, cl, seq("b", 4)...)
	app.waitAcked(t, 60*time.Second, append(seq("b", 4), "ev-0", "ev-1", "ev-2", "ev-3"), func() { second.mustRun(t) })
	if strings.Contains(second.stderr.String(), "partitions lost") {
		t.Errorf("the duplicate lost its partitions after the older process stopped")
	}
}
