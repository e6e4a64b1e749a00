package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// dependencyConfig is writeConfig's config with the metrics endpoint on
// metricsAddr, for the dependency gauge.
func dependencyConfig(t *testing.T, broker, appURL, metricsAddr string) string {
	t.Helper()
	return writeYAML(t, instanceYAML(broker, appURL, metricsAddr, "timeout: 2s")+`topics:
  - name: orders
    retry:
      tiers: [200ms, 500ms, 1s, 2s, 4s]
      jitter: 0
    # These tests watch the dependency tracker alone; the breaker and the
    # guard, which would stop the failing deliveries, have tests of their
    # own (overload_test.go).
    breaker: {enabled: false}
    guard: {enabled: false}
`)
}

// dependencyLines returns kretry's log lines about the app's state.
func dependencyLines(p *proc) []string {
	var out []string
	for line := range strings.Lines(p.stderr.String()) {
		if strings.Contains(line, `msg="app dependency`) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

var dependencyGauge = regexp.MustCompile(`(?m)^kretry_dependency_state\{[^}]*url_full="([^"]*)"[^}]*\} (\S+)$`)

// dependencyState scrapes kretry_dependency_state for url; "" when absent.
func dependencyState(t *testing.T, metricsAddr, url string) string {
	t.Helper()
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, m := range dependencyGauge.FindAllStringSubmatch(string(b), -1) {
		if m[1] == url {
			return m[2]
		}
	}
	return ""
}

func produceOrders(t *testing.T, addr string, n int) []string {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "k-%d", i%7), Value: fmt.Appendf(nil, "order-%d", i)})
	}
	return produceSync(t, newClient(t, addr), rs...)
}

// TestDependencyDownThenUp: with the app down, kretry writes one warn line
// saying the app refuses (not one per record: 40 records are refused on
// every tier) and the gauge reads 2; once the app is up, one line saying
// it recovered, and the gauge reads 0.
func TestDependencyDownThenUp(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	ids := produceOrders(t, addr, 40)

	appAddr := freeAddr(t) // nothing listens here yet
	url := "http://" + appAddr + "/kafka"
	metricsAddr := freeAddr(t)
	run := startKretry(t, "run", "run", "-c", dependencyConfig(t, addr, url, metricsAddr))

	adm := newAdmin(t, addr)
	tier2 := retrytopics.TierTopic("orders", 500*time.Millisecond)
	waitFor(t, 30*time.Second, "refused deliveries moved on to "+tier2, func() bool {
		return endOffset(t, adm, tier2) > 0
	}, func() { run.mustRun(t) })
	waitFor(t, 10*time.Second, "kretry_dependency_state 2 (refusing)", func() bool {
		return dependencyState(t, metricsAddr, url) == "2"
	}, func() { run.mustRun(t) })
	lines := dependencyLines(run)
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "state=refusing") ||
		!strings.Contains(lines[0], "url="+url) || !strings.Contains(lines[0], `seen="connection refused"`) {
		t.Fatalf("while the app is down, the dependency lines are:\n%s\nwant one WARN line with state=refusing, url=%s and seen=\"connection refused\"",
			strings.Join(lines, "\n"), url)
	}

	app := startAppOn(t, appAddr, func(*delivery.Message) answer { return answer{http.StatusOK, ""} })
	waitFor(t, 60*time.Second, "the app to acknowledge all 40 records", func() bool {
		return app.ackedAll(ids)
	}, func() { run.mustRun(t) })
	waitFor(t, 10*time.Second, "kretry_dependency_state 0 (reachable)", func() bool {
		return dependencyState(t, metricsAddr, url) == "0"
	}, func() { run.mustRun(t) })
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
	lines = dependencyLines(run)
	if len(lines) != 2 || !strings.Contains(lines[1], "level=WARN") || !strings.Contains(lines[1], "state=reachable") ||
		!strings.Contains(lines[1], "previous=refusing") || !strings.Contains(lines[1], "recovered") {
		t.Errorf("after the app came up, the dependency lines are:\n%s\nwant the refusing line and one WARN line saying it recovered (state=reachable previous=refusing)",
			strings.Join(lines, "\n"))
	}
	t.Logf("dependency lines:\n%s", strings.Join(lines, "\n"))
}

// TestDependencyMostlyFailing: an app answering 404 to everything gets one
// warn line naming 404 as the dominant answer (the records go to the DLQ,
// 404 being permanent), and the gauge reads 1.
func TestDependencyMostlyFailing(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	produceOrders(t, addr, 60)
	app := startApp(t, func(*delivery.Message) answer { return answer{http.StatusNotFound, "no such route"} })
	metricsAddr := freeAddr(t)
	run := startKretry(t, "run", "run", "-c", dependencyConfig(t, addr, app.url(), metricsAddr))

	waitFor(t, 30*time.Second, "60 deliveries", func() bool { return len(app.deliveries()) >= 60 }, func() { run.mustRun(t) })
	waitFor(t, 10*time.Second, "kretry_dependency_state 1 (mostly failing)", func() bool {
		return dependencyState(t, metricsAddr, app.url()) == "1"
	}, func() { run.mustRun(t) })
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
	lines := dependencyLines(run)
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], `state="mostly failing"`) ||
		!strings.Contains(lines[0], "dominant=404") || !strings.Contains(lines[0], "url="+app.url()) ||
		!strings.Contains(lines[0], "no such route") {
		t.Errorf("the dependency lines are:\n%s\nwant one WARN line with state=\"mostly failing\", dominant=404, url=%s and the app's answer as the example",
			strings.Join(lines, "\n"), app.url())
	}
	t.Logf("dependency lines:\n%s", strings.Join(lines, "\n"))
}
