package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// stampApp is an app that notes when each value was first acknowledged
// and answers 503 to the first attempt of values in fail.
type stampApp struct {
	*testApp
	mu    sync.Mutex
	acked map[string]time.Time
	fail  map[string]bool
}

func startStampApp(t *testing.T, fail ...string) *stampApp {
	a := &stampApp{acked: map[string]time.Time{}, fail: map[string]bool{}}
	for _, v := range fail {
		a.fail[v] = true
	}
	a.testApp = startApp(t, func(m *delivery.Message) answer {
		v := string(m.Value)
		if a.fail[v] && m.Attempt == 1 {
			return answer{http.StatusServiceUnavailable, "busy"}
		}
		a.mu.Lock()
		if _, ok := a.acked[v]; !ok {
			a.acked[v] = time.Now()
		}
		a.mu.Unlock()
		return answer{http.StatusOK, ""}
	})
	return a
}

// when returns when v was first acknowledged (zero if not yet).
func (a *stampApp) when(v string) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked[v]
}

// waitAcked waits until every value is acknowledged and returns when the
// last one was.
func (a *stampApp) waitAcked(t *testing.T, timeout time.Duration, vs []string, check ...func()) time.Time {
	t.Helper()
	var last time.Time
	waitFor(t, timeout, fmt.Sprintf("%d values acknowledged", len(vs)), func() bool {
		last = time.Time{}
		for _, v := range vs {
			w := a.when(v)
			if w.IsZero() {
				return false
			}
			if w.After(last) {
				last = w
			}
		}
		return true
	}, check...)
	return last
}

// identityConfig is a `kretry run` config with default group settings (the
// 45s session timeout): only static membership and an explicit leave can
// explain a takeover faster than that.
func identityConfig(t *testing.T, addr, appURL string, extra ...string) string {
	t.Helper()
	cfg := fmt.Sprintf(`kafka:
  brokers: [%q]
  fetch_max_wait: 50ms
`+strings.Join(extra, "")+`app:
  url: %q
  timeout: 5s
metrics:
  listen: ""
log:
  level: info
topics:
  - name: orders
    retry:
      tiers: [2s]
      jitter: 0
`, addr, appURL)
	path := filepath.Join(t.TempDir(), "kretry.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// produceValues writes one record per value, key = the value's prefix
// before '-', spread over partitions by key.
func produceValues(t *testing.T, cl *kgo.Client, vs ...string) {
	t.Helper()
	var rs []*kgo.Record
	for _, v := range vs {
		k, _, _ := strings.Cut(v, "-")
		rs = append(rs, &kgo.Record{Topic: "orders", Key: []byte(k), Value: []byte(v)})
	}
	produceSync(t, cl, rs...)
}

func seq(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("k%d-%s%d", i, prefix, i))
	}
	return out
}

// TestKillAndRestartResumesAtOnce: kill -9 of `kretry run` with default
// settings and an immediate restart under the same kafka.instance_id (a
// container restarted in its pod): the restarted instance takes its
// partitions back at once (static membership) instead of after the 45s
// session timeout. A record waiting in a tier and the key parked behind it
// survive: the head is retried no earlier than its due time and the parked
// record follows it. Target (issue 9): delivering again within 5s.
func TestKillAndRestartResumesAtOnce(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	app := startStampApp(t, "h-head")
	cfg := identityConfig(t, addr, app.url())
	env := []string{"KRETRY_KAFKA__INSTANCE_ID=pod-0"}
	cl := newClient(t, addr)

	run1 := startKretryEnv(t, "run#1", env, "run", "-c", cfg)
	produceValues(t, cl, seq("a", 6)...)
	app.waitAcked(t, 60*time.Second, seq("a", 6), func() { run1.mustRun(t) })
	// Key h: its head fails once and waits 2s in the tier; h-next parks.
	produceValues(t, cl, "h-head", "h-next")
	// The head's move is committed (read_committed sees it) before the kill:
	// an open transaction would be aborted by the restart.
	tier := retrytopics.TierTopic("orders", 2*time.Second)
	reader := readTopic(t, addr, tier, nil)
	waitFor(t, 30*time.Second, "the head committed to "+tier, func() bool { return len(reader.records()) > 0 }, func() { run1.mustRun(t) })
	run1.kill(t)
	moved := reader.records()
	if len(moved) != 1 {
		t.Fatalf("%s holds %d records, want the head", tier, len(moved))
	}
	dueText, _ := header(moved[0], retrytopics.HeaderDueTime)
	due, err := time.Parse(time.RFC3339Nano, dueText)
	if err != nil {
		t.Fatalf("%s: %v", retrytopics.HeaderDueTime, err)
	}

	restart := time.Now()
	run2 := startKretryEnv(t, "run#2", env, "run", "-c", cfg)
	produceValues(t, cl, seq("b", 6)...)
	last := app.waitAcked(t, 40*time.Second, seq("b", 6), func() { run2.mustRun(t) })
	took := last.Sub(restart)
	t.Logf("broker %s: killed-then-restarted instance delivered every partition %v after the restart (session timeout 45s; target 5s)",
		brokerKind, took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("the restart took %v: it waited for the session timeout instead of taking its static membership back", took)
	}

	head := app.waitAcked(t, 30*time.Second, []string{"h-head"}, func() { run2.mustRun(t) })
	next := app.waitAcked(t, 30*time.Second, []string{"h-next"}, func() { run2.mustRun(t) })
	if head.Before(due) {
		t.Errorf("the head was acknowledged at %v, before its due time %v", head, due)
	}
	if next.Before(head) {
		t.Errorf("h-next acknowledged at %v, before its key's head at %v", next, head)
	}
	if code := run2.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
}

// TestSigtermHandsOverAtOnce: two instances with their own instance ids
// share the partitions; SIGTERM to one hands its partitions to the other at
// once (a static member leaves the group explicitly on a clean stop).
// Target (issue 9): within 3s.
func TestSigtermHandsOverAtOnce(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 4)
	app := startStampApp(t)
	cfg := identityConfig(t, addr, app.url())
	cl := newClient(t, addr)
	a := startKretryEnv(t, "a", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-a"}, "run", "-c", cfg)
	b := startKretryEnv(t, "b", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-b"}, "run", "-c", cfg)
	waitFor(t, 60*time.Second, "both instances assigned", func() bool {
		return strings.Contains(a.stderr.String(), "partitions assigned") && strings.Contains(b.stderr.String(), `msg="partitions assigned"`) &&
			!strings.Contains(a.stderr.String(), `partitions=none`) && !strings.Contains(b.stderr.String(), `partitions=none`)
	}, func() { a.mustRun(t); b.mustRun(t) })
	produceValues(t, cl, seq("a", 8)...)
	app.waitAcked(t, 60*time.Second, seq("a", 8), func() { a.mustRun(t); b.mustRun(t) })

	stop := time.Now()
	if code := a.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
	stopped := time.Since(stop)
	produceValues(t, cl, seq("b", 8)...)
	last := app.waitAcked(t, 40*time.Second, seq("b", 8), func() { b.mustRun(t) })
	took := last.Sub(stop)
	t.Logf("broker %s: the other instance delivered every partition %v after the SIGTERM (the stop itself took %v; session timeout 45s; target 3s)",
		brokerKind, took.Round(time.Millisecond), stopped.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("the handover took %v: the stopped static member did not leave the group", took)
	}
}

// TestSameInstanceIDTwiceStopsTheOlder: a second `kretry run` with the same
// kafka.instance_id (a copied config, a duplicate deployment) fences the
// first, which exits non-zero with one line naming the id, the group and
// the key to change; the second delivers everything, the first one's
// records included.
func TestSameInstanceIDTwiceStopsTheOlder(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 2)
	app := startStampApp(t)
	cfg := identityConfig(t, addr, app.url())
	cl := newClient(t, addr)
	env := []string{"KRETRY_KAFKA__INSTANCE_ID=copied"}
	first := startKretryEnv(t, "first", env, "run", "-c", cfg)
	produceValues(t, cl, seq("a", 4)...)
	app.waitAcked(t, 60*time.Second, seq("a", 4), func() { first.mustRun(t) })
	second := startKretryEnv(t, "second", env, "run", "-c", cfg)
	produceValues(t, cl, seq("b", 4)...)
	code := first.wait(t, 60*time.Second)
	if code == 0 {
		t.Errorf("the fenced instance exited 0, want non-zero")
	}
	// kretry's own line (franz-go may log its FENCED_INSTANCE_ID at error
	// level first).
	var lines []string
	for _, l := range strings.Split(first.stderr.String(), "\n") {
		if strings.Contains(l, "level=ERROR") && strings.Contains(l, "kretry stopped with an error") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `\"copied\"`) || !strings.Contains(lines[0], "orders-kretry") || !strings.Contains(lines[0], "KRETRY_KAFKA__INSTANCE_ID") {
		t.Errorf("the fenced instance's error lines %q: want one naming the instance id, the group and KRETRY_KAFKA__INSTANCE_ID", lines)
	}
	if strings.Contains(first.stderr.String(), "invalid attempt") {
		t.Errorf("the fenced instance reports a state-machine error:\n%s", first.stderr.String())
	}
	app.waitAcked(t, 60*time.Second, seq("b", 4), func() { second.mustRun(t) })
}

// TestKillWithoutRestartWaitsForTheSessionTimeout: a killed static member
// that is not restarted keeps its partitions until the session timeout
// (6s here; 45s by default) expires; then the other instance takes them.
func TestKillWithoutRestartWaitsForTheSessionTimeout(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 4)
	app := startStampApp(t)
	cfg := identityConfig(t, addr, app.url(), "  session_timeout: 6s\n")
	cl := newClient(t, addr)
	a := startKretryEnv(t, "a", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-a"}, "run", "-c", cfg)
	b := startKretryEnv(t, "b", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-b"}, "run", "-c", cfg)
	waitFor(t, 60*time.Second, "both instances assigned", func() bool {
		return strings.Contains(a.stderr.String(), `msg="partitions assigned"`) && strings.Contains(b.stderr.String(), `msg="partitions assigned"`) &&
			!strings.Contains(a.stderr.String(), `partitions=none`) && !strings.Contains(b.stderr.String(), `partitions=none`)
	}, func() { a.mustRun(t); b.mustRun(t) })
	produceValues(t, cl, seq("a", 8)...)
	app.waitAcked(t, 60*time.Second, seq("a", 8), func() { a.mustRun(t); b.mustRun(t) })
	a.kill(t)
	killed := time.Now()
	produceValues(t, cl, seq("b", 8)...)
	last := app.waitAcked(t, 60*time.Second, seq("b", 8), func() { b.mustRun(t) })
	took := last.Sub(killed)
	t.Logf("broker %s: the other instance delivered every partition %v after a kill -9 without restart (session timeout 6s)",
		brokerKind, took.Round(time.Millisecond))
	if took < 4*time.Second {
		t.Errorf("took over %v after the kill: a static member's partitions should wait for the session timeout", took)
	}
}
