package e2e

import (
	"fmt"
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
