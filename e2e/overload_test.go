package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// overloadConfig is a config for the breaker and guard tests: one topic of
// 3 partitions, a 5s tier, the breaker probing after 200ms (up to 1s).
func overloadConfig(t *testing.T, broker, appURL, metricsAddr string) string {
	t.Helper()
	return writeYAML(t, instanceYAML(broker, appURL, metricsAddr, "timeout: 2s")+`topics:
  - name: orders
    ordering: key
    retry:
      tiers: [5s]
      jitter: 0
    breaker: {wait: 200ms, max_wait: 1s}
`)
}

// produceKeyed writes n records of n keys to orders.
func produceKeyed(t *testing.T, addr string, n int) []string {
	t.Helper()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "key-%d", i), Value: fmt.Appendf(nil, "order-%d", i)})
	}
	return produceSync(t, newClient(t, addr), rs...)
}

// readyz returns /readyz's status and body.
func readyz(metricsAddr string) (int, string) {
	resp, err := http.Get("http://" + metricsAddr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func logCount(p *proc, s string) int { return strings.Count(p.stderr.String(), s) }

// gauge returns the value of the one series of name in /metrics, "" when
// absent.
func gauge(t *testing.T, metricsAddr, name string) string {
	t.Helper()
	for line := range strings.Lines(scrape(t, metricsAddr)) {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	return ""
}

// TestOutageDeadLettersNothing (issue 11's regression test): the app
// refuses connections, then answers 503, for a while; the breaker opens,
// /readyz and kretry_breaker_state say so, nothing reaches the DLQ, only
// the failures before it opened and failed probes move to the tier, and
// every record is delivered once the app is back.
func TestOutageDeadLettersNothing(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	ids := produceKeyed(t, addr, 60)
	appAddr := freeAddr(t) // nothing listens: connections are refused
	url := "http://" + appAddr + "/kafka"
	metricsAddr := freeAddr(t)
	tier := retrytopics.TierTopic("orders", 5*time.Second)
	dlq, tiered := readTopic(t, addr, retrytopics.DLQTopic("orders"), nil), readTopic(t, addr, tier, nil)
	run := startKretry(t, "run", "run", "-c", overloadConfig(t, addr, url, metricsAddr))

	waitFor(t, 30*time.Second, "the breaker open and two failed probe rounds (refused)", func() bool {
		return logCount(run, "breaker open: most recent deliveries failed") == 1 && logCount(run, "a probe failed") >= 2
	}, func() { run.mustRun(t) })
	if code, body := readyz(metricsAddr); code != http.StatusServiceUnavailable || !strings.Contains(body, `topic "orders": breaker`) {
		t.Errorf("/readyz while the breaker is open: %d %q, want 503 naming the topic's breaker", code, body)
	}
	if v := gauge(t, metricsAddr, "kretry_breaker_state"); v != "1" && v != "2" {
		t.Errorf("kretry_breaker_state = %q while the app is down, want 1 (open) or 2 (probing)", v)
	}

	var up atomic.Bool
	app := startAppOn(t, appAddr, func(*delivery.Message) answer {
		if up.Load() {
			return answer{http.StatusOK, ""}
		}
		return answer{http.StatusServiceUnavailable, "maintenance"}
	})
	probesBefore := logCount(run, "a probe failed")
	waitFor(t, 30*time.Second, "a probe answered 503", func() bool {
		return logCount(run, "a probe failed") > probesBefore
	}, func() { run.mustRun(t) })
	up.Store(true)
	waitFor(t, 60*time.Second, "the app to acknowledge all 60 records", func() bool { return app.ackedAll(ids) }, func() { run.mustRun(t) })
	waitFor(t, 10*time.Second, "/readyz ready again", func() bool { code, _ := readyz(metricsAddr); return code == http.StatusOK })

	if n := len(dlq.sync(t)); n != 0 {
		t.Errorf("the DLQ holds %d records; an outage must dead-letter nothing", n)
	}
	// Failed probes count too (a probe never dead-letters): 3 per round.
	rounds := logCount(run, "a probe failed")
	if n, bound := len(tiered.sync(t)), 9+3*(rounds+1); n > bound {
		t.Errorf("%s holds %d records: more walked the tier than failed before the breaker opened and in %d probe rounds (at most %d)", tier, n, rounds, bound)
	} else {
		t.Logf("%d records moved to %s (before the breaker opened, or as failed probes of %d rounds)", n, tier, rounds)
	}
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
	if logCount(run, "breaker closed") != 1 {
		t.Errorf("want one 'breaker closed' line:\n%s", run.stderr.String())
	}
}

// TestWrongPathStopsTheGuard (issue 11's second regression test): every
// record answers 404 (app.url names a path the app does not serve); at
// most guard.max_dead_letters (10) reach the DLQ, one ERROR line says what
// was seen and how to resume, and delivery resumes once the app serves it.
func TestWrongPathStopsTheGuard(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	ids := produceKeyed(t, addr, 60)
	var fixed atomic.Bool
	app := startApp(t, func(*delivery.Message) answer {
		if fixed.Load() {
			return answer{http.StatusOK, ""}
		}
		return answer{http.StatusNotFound, "404 page not found"}
	})
	metricsAddr := freeAddr(t)
	dlq := readTopic(t, addr, retrytopics.DLQTopic("orders"), nil)
	run := startKretry(t, "run", "run", "-c", overloadConfig(t, addr, app.url(), metricsAddr))

	waitFor(t, 30*time.Second, "the guard's line", func() bool { return logCount(run, "guard: the same permanent answer") == 1 }, func() { run.mustRun(t) })
	var line string
	for l := range strings.Lines(run.stderr.String()) {
		if strings.Contains(l, "guard: the same permanent answer") {
			line = l
		}
	}
	for _, want := range []string{"level=ERROR", "status=404", "dead_lettered=10", "example_ids=", "resume=", "window=1m0s"} {
		if !strings.Contains(line, want) {
			t.Errorf("the guard's line lacks %q:\n%s", want, line)
		}
	}
	// The top failure fingerprint names the answer.
	if v := gaugeWith(t, metricsAddr, "kretry_delivery_failures_total", `kretry_error_fingerprint="status #: # page not found"`); v == "" || v == "0" {
		t.Errorf("kretry_delivery_failures_total for the 404 fingerprint = %q, want the failures counted:\n%s", v, scrape(t, metricsAddr))
	}
	fixed.Store(true)
	acked := func() int {
		n := 0
		for _, id := range ids {
			if app.ackedAll([]string{id}) {
				n++
			}
		}
		return n
	}
	waitFor(t, 60*time.Second, "every record acknowledged or dead-lettered", func() bool {
		return acked()+len(dlq.records()) == 60
	}, func() { run.mustRun(t) })
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
	if n := len(dlq.sync(t)); n != 10 {
		t.Errorf("the DLQ holds %d records, want max_dead_letters (10): the guard stops after them", n)
	}
}

// budgetConfig is a config with one topic of ordering none whose other
// keys are topic (indented as under topics[0]).
func budgetConfig(t *testing.T, broker, appURL, metricsAddr string, extra string) string {
	t.Helper()
	return writeYAML(t, instanceYAML(broker, appURL, metricsAddr, "timeout: 2s")+`topics:
  - name: orders
    ordering: none
`+extra)
}

// TestRetryBudget: 40 of 100 records fail their first attempt; with
// retries capped at 10% of deliveries plus 5/s, due retries wait (the
// denial counter grows) and are delivered later, none dropped or
// dead-lettered.
func TestRetryBudget(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	ids := produceKeyed(t, addr, 100)
	app := startApp(t, func(m *delivery.Message) answer {
		if m.Offset%5 < 2 && m.Attempt == 1 {
			return answer{http.StatusServiceUnavailable, "busy"}
		}
		return answer{http.StatusOK, ""}
	})
	metricsAddr := freeAddr(t)
	dlq := readTopic(t, addr, retrytopics.DLQTopic("orders"), nil)
	// The breaker and the guard off: this test watches the budget alone.
	run := startKretry(t, "run", "run", "-c", budgetConfig(t, addr, app.url(), metricsAddr, `    breaker: {enabled: false}
    guard: {enabled: false}
    retry:
      tiers: [100ms, 200ms]
      jitter: 0
      budget: {ratio: 0.1, min_per_second: 5, window: 10s}
`))
	waitFor(t, 60*time.Second, "all 100 records acknowledged", func() bool { return app.ackedAll(ids) }, func() { run.mustRun(t) })
	denied := gauge(t, metricsAddr, "kretry_retry_budget_denied_total")
	if denied == "" || denied == "0" {
		t.Errorf("kretry_retry_budget_denied_total = %q: 40 retries against a budget of ~14 + 5/s must have waited", denied)
	}
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
	if n := len(dlq.sync(t)); n != 0 {
		t.Errorf("the DLQ holds %d records; over budget retries wait, never dropped", n)
	}
	t.Logf("retries denied (waited): %s", denied)
}

// TestExpiry: records older than max_age (by their timestamp) are not
// delivered but dead-lettered as "expired"; fresh ones are delivered.
func TestExpiry(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 1)
	old := time.Now().Add(-2 * time.Hour)
	var rs []*kgo.Record
	for i := range 10 {
		r := &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "key-%d", i), Value: fmt.Appendf(nil, "order-%d", i)}
		if i%2 == 0 {
			r.Timestamp = old
		}
		rs = append(rs, r)
	}
	ids := produceSync(t, newClient(t, addr), rs...)
	app := startApp(t, func(*delivery.Message) answer { return answer{http.StatusOK, ""} })
	metricsAddr := freeAddr(t)
	dlq := readTopic(t, addr, retrytopics.DLQTopic("orders"), nil)
	run := startKretry(t, "run", "run", "-c", budgetConfig(t, addr, app.url(), metricsAddr, "    max_age: 1h\n    retry: {tiers: [100ms], jitter: 0}\n"))
	var fresh []string
	for i, id := range ids {
		if i%2 == 1 {
			fresh = append(fresh, id)
		}
	}
	waitFor(t, 30*time.Second, "the 5 fresh records acknowledged and 5 expired ones dead-lettered", func() bool {
		return app.ackedAll(fresh) && len(dlq.records()) == 5
	}, func() { run.mustRun(t) })
	for _, d := range app.deliveries() {
		for i, id := range ids {
			if i%2 == 0 && d.msg.ID == id {
				t.Errorf("expired record %s was delivered", id)
			}
		}
	}
	for _, r := range dlq.records() {
		cls, _ := header(r, retrytopics.HeaderErrorClass)
		msg, _ := header(r, retrytopics.HeaderErrorMessage)
		if cls != "expired" || !strings.Contains(msg, "max_age is 1h") {
			t.Errorf("DLQ record %s: class %q, message %q; want expired and the age against max_age", r.Value, cls, msg)
		}
	}
	if v := gaugeWith(t, metricsAddr, "kretry_records_expired_total", `kretry_expired_action="dead_letter"`); v != "5" {
		t.Errorf("kretry_records_expired_total{dead_letter} = %q, want 5", v)
	}
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
}

// gaugeWith is gauge for the series of name whose labels contain label.
func gaugeWith(t *testing.T, metricsAddr, name, label string) string {
	t.Helper()
	for line := range strings.Lines(scrape(t, metricsAddr)) {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, label) {
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	return ""
}
