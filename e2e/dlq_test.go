package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
)

// dlqStats runs `kretry dlq stats --json`.
func dlqStats(t *testing.T, cfg string) (waiting, redriven int, ok bool) {
	t.Helper()
	out, _, code := runKretry(t, 30*time.Second, nil, "dlq", "stats", "-c", cfg, "--topic", "orders", "--json")
	var s struct{ Waiting, Redriven int }
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil {
		return 0, 0, false
	}
	return s.Waiting, s.Redriven, true
}

// TestDLQRedriveWholeProcess: 30 records rejected with 422 reach the DLQ
// of a running `kretry run`; a `kretry dlq redrive` is stopped with SIGINT
// (exit 0, the count so far), a second one is killed with SIGKILL halfway
// while a discard is refused as busy, and a third run moves the rest. The
// app then has every record exactly once more, each with its redrive
// headers.
func TestDLQRedriveWholeProcess(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 2)
	app := startApp(t, func(m *delivery.Message) answer {
		if m.Redrives > 0 {
			return answer{http.StatusOK, ""}
		}
		return answer{http.StatusUnprocessableEntity, "unknown customer"}
	})
	// Every record answers 422: the guard would take that for a systemic
	// failure (it is, on purpose) and stop after 10; this test needs 30
	// in the DLQ.
	cfg := writeConfig(t, runConfig{Broker: addr, AppURL: app.url(), Tiers: []string{"100ms"}, NoGuard: true})
	run := startKretry(t, "run", "run", "-c", cfg)
	const n = 30
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "k-%d", i%7), Value: fmt.Appendf(nil, "order-%d", i)})
	}
	ids := produceSync(t, newClient(t, addr), rs...)
	waitFor(t, 60*time.Second, "30 records waiting in the DLQ", func() bool {
		w, _, ok := dlqStats(t, cfg)
		return ok && w == n
	}, func() { run.mustRun(t) })

	redriven := func() int {
		k := 0
		for _, d := range app.deliveries() {
			if d.msg.Redrives > 0 {
				k++
			}
		}
		return k
	}
	// 1. Ctrl-C: a clean stop with the count so far.
	first := startKretry(t, "redrive-1", "dlq", "redrive", "-c", cfg, "--topic", "orders", "--rate", "10")
	waitFor(t, 30*time.Second, "the first redrive under way", func() bool { return redriven() >= 3 }, func() { first.mustRun(t) })
	_ = first.cmd.Process.Signal(syscall.SIGINT)
	if code := first.wait(t, 20*time.Second); code != 0 || !strings.Contains(first.stdout.String(), "stopped before the end") {
		t.Fatalf("redrive after SIGINT: exit %d\n%s%s", code, first.stdout.String(), first.stderr.String())
	}
	// 2. A second operation while one runs is refused; then kill -9.
	second := startKretry(t, "redrive-2", "dlq", "redrive", "-c", cfg, "--topic", "orders", "--rate", "5")
	before := redriven()
	waitFor(t, 30*time.Second, "the second redrive under way", func() bool { return redriven() >= before+2 }, func() { second.mustRun(t) })
	_, errs, code := runKretry(t, 60*time.Second, nil, "dlq", "discard", "-c", cfg, "--topic", "orders", "--reason", "test")
	if code != 1 || !strings.Contains(errs, "another redrive or discard of this DLQ is running") {
		t.Fatalf("discard during a redrive: exit %d, %s", code, errs)
	}
	second.kill(t)
	// 3. The rerun moves what is left.
	out, errs, code := runKretry(t, 60*time.Second, nil, "dlq", "redrive", "-c", cfg, "--topic", "orders", "--rate", "0", "--quiet")
	if code != 0 || !strings.Contains(out, "redriven ") {
		t.Fatalf("rerun: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("rerun: %s", strings.TrimSpace(out))
	waitFor(t, 60*time.Second, "every record redriven and acknowledged", func() bool { return app.ackedAll(ids) }, func() { run.mustRun(t) })
	if w, r, ok := dlqStats(t, cfg); !ok || w != 0 || r != n {
		t.Fatalf("stats after: waiting %d redriven %d (%v), want 0, %d", w, r, ok, n)
	}
	seen := map[string]int{}
	for _, d := range app.deliveries() {
		if d.msg.Redrives > 0 {
			seen[d.msg.ID]++
			if d.msg.Redrives != 1 || d.msg.RedriveID == "" || d.msg.Attempt != 1 {
				t.Errorf("%s: redrives %d id %q attempt %d, want 1, an id, 1", d.msg.ID, d.msg.Redrives, d.msg.RedriveID, d.msg.Attempt)
			}
		}
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("%s redriven %d times, want once", id, seen[id])
		}
	}
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
}
