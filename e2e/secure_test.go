package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// Secured clusters (issue 9): `kretry run`, `kretry lag` and `kretry
// parking release` against one Kafka node with a SASL_SSL (SCRAM-SHA-512)
// listener and an SSL listener that requires client certificates, and the
// errors of a wrong password, an unknown CA and a plaintext port given to
// a TLS client. The test sets up and checks topics over the node's
// PLAINTEXT listener; kretry only ever gets the secured ones.

// secureUser and securePassword are the SCRAM-SHA-512 credentials the
// node accepts. The password is passed as KRETRY_KAFKA__SASL__PASSWORD
// and must never appear in kretry's output nor in /metrics.
const (
	secureUser     = "kretry"
	securePassword = "Sc7am-pw-do-not-print-4f1c"
	wrongPassword  = "Wr0ng-pw-do-not-print-9b2e"
)

// secureKretry is how one kretry configuration reaches the secured node.
type secureKretry struct {
	broker   string
	tls      string // the kafka.tls YAML mapping
	sasl     bool   // SCRAM-SHA-512 as secureUser, password from env
	password string // KRETRY_KAFKA__SASL__PASSWORD with sasl
}

func (s secureKretry) env() []string {
	if !s.sasl {
		return nil
	}
	return []string{"KRETRY_KAFKA__SASL__PASSWORD=" + s.password}
}

// writeSecureConfig writes a `kretry run` config for topic: tiers [200ms]
// without jitter, on_dead_letter hold (so that a key whose head is
// dead-lettered waits for `kretry parking release`), the metrics endpoint
// on metricsAddr with a lag scan every 300ms.
func writeSecureConfig(t *testing.T, s secureKretry, topic, appURL, metricsAddr string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "kafka:\n  brokers: [%q]\n  fetch_max_wait: 50ms\n  session_timeout: 6s\n", s.broker)
	fmt.Fprintf(&b, "  tls: %s\n", s.tls)
	if s.sasl {
		fmt.Fprintf(&b, "  sasl: {mechanism: scram-sha-512, username: %s}\n", secureUser)
	}
	fmt.Fprintf(&b, "app: {url: %q, timeout: 5s}\n", appURL)
	fmt.Fprintf(&b, "metrics: {listen: %q}\n", metricsAddr)
	b.WriteString("lag: {interval: 300ms, window: 2}\nlog: {level: info}\n")
	fmt.Fprintf(&b, "topics:\n  - name: %s\n    on_dead_letter: hold\n    retry: {tiers: [200ms], jitter: 0}\n", topic)
	path := filepath.Join(t.TempDir(), "kretry.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func tlsYAML(ca, cert, key string) string {
	s := fmt.Sprintf("{enabled: true, ca_file: %q", ca)
	if cert != "" {
		s += fmt.Sprintf(", cert_file: %q, key_file: %q", cert, key)
	}
	return s + "}"
}

// TestSecure starts one Kafka node with both secured listeners and runs
// the pipeline over each, then the error cases.
func TestSecure(t *testing.T) {
	if brokerKind != kafkatest.Kafka {
		t.Skip("the embedded broker has no TLS listener")
	}
	c := kafkatest.New(t, kafkatest.Config{Security: &kafkatest.Security{
		SASLSSL: true, SSL: true, Users: map[string]string{secureUser: securePassword},
	}})
	f := c.TLS()
	t.Run("SASL_SSL", func(t *testing.T) {
		securePipeline(t, c, "orders-sasl", secureKretry{
			broker: c.SASLSSLAddrs()[0], tls: tlsYAML(f.CA, "", ""), sasl: true, password: securePassword,
		})
	})
	t.Run("TLS client certificate", func(t *testing.T) {
		securePipeline(t, c, "orders-mtls", secureKretry{
			broker: c.SSLAddrs()[0], tls: tlsYAML(f.CA, f.ClientCert, f.ClientKey),
		})
	})
	t.Run("errors", func(t *testing.T) { secureErrors(t, c) })
}

// securePipeline runs `kretry run` over s: four records are acknowledged;
// key "held" has its head dead-lettered (503 through the one tier, then
// exhausted) and its two later records parked and held; `kretry lag` sees
// the group and the DLQ; /metrics measures the DLQ (the lag monitor's
// client got through too); `kretry parking release` releases the key and
// the app then gets its two records in order. The password appears in no
// output and not in /metrics.
func securePipeline(t *testing.T, c *kafkatest.Cluster, topic string, s secureKretry) {
	plain := c.Addrs()[0]
	createTopic(t, plain, topic, 3)
	app := startApp(t, func(m *delivery.Message) answer {
		if string(m.Value) == "held-0" {
			return answer{http.StatusServiceUnavailable, "held-0 always fails"}
		}
		return answer{http.StatusOK, ""}
	})
	var rs []*kgo.Record
	for i := range 4 {
		rs = append(rs, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "ok-%d", i)})
	}
	for i := range 3 {
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte("held"), Value: fmt.Appendf(nil, "held-%d", i)})
	}
	ids := produceSync(t, newClient(t, plain), rs...)
	okIDs, heldIDs := ids[:4], ids[5:]

	metricsAddr := freeAddr(t)
	cfg := writeSecureConfig(t, s, topic, app.url(), metricsAddr)
	run := startKretryEnv(t, "run", s.env(), "run", "-c", cfg)
	alive := func() { run.mustRun(t) }

	waitFor(t, 60*time.Second, "the app to acknowledge the four ok records", func() bool { return app.ackedAll(okIDs) }, alive)
	dlq := retrytopics.DLQTopic(topic)
	adm := newAdmin(t, plain)
	waitFor(t, 30*time.Second, "held-0 in "+dlq, func() bool { return endOffset(t, adm, dlq) > 0 }, alive)
	dl := readTopic(t, plain, dlq, nil).sync(t)
	if len(dl) != 1 || string(dl[0].Value) != "held-0" {
		t.Fatalf("%s holds %d records (first %q), want held-0 alone", dlq, len(dl), firstValue(dl))
	}
	if cls, _ := header(dl[0], retrytopics.HeaderErrorClass); cls != "exhausted" {
		t.Errorf("held-0 in the DLQ has %s=%q, want exhausted", retrytopics.HeaderErrorClass, cls)
	}

	// The lag monitor of `kretry run` reads over the secured listener too:
	// its gauge of the DLQ is measured and not 0. (It counts offsets from
	// the log start: held-0, its transaction marker and the sentinels that
	// sync wrote to each partition.)
	var metrics string
	if !poll(30*time.Second, func() bool {
		alive()
		metrics = scrape(t, metricsAddr)
		v := stageRecords(metrics, topic, "dlq")
		return v != "" && v != "0"
	}) {
		var lines []string
		for line := range strings.Lines(metrics) {
			if strings.HasPrefix(line, "kretry_stage_records") || strings.HasPrefix(line, "kretry_lag_scans_total") {
				lines = append(lines, line)
			}
		}
		t.Fatalf("after 30s, /metrics has no kretry_stage_records of %s's DLQ above 0:\n%s", topic, strings.Join(lines, ""))
	}
	if strings.Contains(metrics, s.password) && s.password != "" {
		t.Errorf("/metrics shows the SASL password")
	}
	if app.ackedAll(heldIDs[:1]) {
		t.Fatalf("held-1 was delivered before the release (on_dead_letter: hold)")
	}

	lagOut, lagErr, code := runKretry(t, 30*time.Second, s.env(), "lag", "-c", cfg, "--json")
	if code != 0 {
		t.Fatalf("kretry lag exited %d:\n%s%s", code, lagOut, lagErr)
	}
	var snap struct {
		Groups []struct{ Name, Error string }
		DLQ    []struct {
			Topic string
			Lag   int64
		}
	}
	if err := json.Unmarshal([]byte(lagOut), &snap); err != nil {
		t.Fatalf("kretry lag --json: %v\n%s", err, lagOut)
	}
	group, dlqRows := false, 0
	for _, g := range snap.Groups {
		group = group || (g.Name == topic+"-kretry" && g.Error == "")
	}
	for _, r := range snap.DLQ {
		if r.Topic == dlq {
			dlqRows++
		}
	}
	if !group || dlqRows == 0 {
		t.Errorf("kretry lag: group %s-kretry seen without error %v, %d rows of %s; want both:\n%s", topic, group, dlqRows, dlq, lagOut)
	}

	relOut, relErr, code := runKretry(t, 30*time.Second, s.env(), "parking", "release", "-c", cfg, "--topic", topic, "--key", "held")
	if code != 0 || !strings.Contains(relOut, `release of key "held" written to `+topic+".parking") {
		t.Fatalf("kretry parking release exited %d:\nstdout:\n%s\nstderr:\n%s", code, relOut, relErr)
	}
	waitFor(t, 30*time.Second, "held-1 and held-2 delivered after the release", func() bool { return app.ackedAll(heldIDs) }, alive)
	var order []string
	for _, d := range app.deliveries() {
		if v := string(d.msg.Value); strings.HasPrefix(v, "held-") && v != "held-0" {
			order = append(order, v)
		}
	}
	if strings.Join(order, ",") != "held-1,held-2" {
		t.Errorf("the held key's records came as %v, want held-1, held-2", order)
	}
	if code := run.stop(t, 20*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
	if s.password != "" {
		for name, out := range map[string]string{
			"run stdout": run.stdout.String(), "run stderr": run.stderr.String(),
			"lag": lagOut + lagErr, "parking release": relOut + relErr,
		} {
			if strings.Contains(out, s.password) {
				t.Errorf("kretry %s shows the SASL password", name)
			}
		}
	}
	if bad := app.malformed(); len(bad) > 0 {
		t.Errorf("requests breaking the wire contract: %q", bad)
	}
}

// secureErrors: a wrong password, an unknown CA and a plaintext port given
// to a TLS client each make `kretry run`, `kretry lag` and `kretry parking
// release` exit 1 within the connection timeout (15s) with an error that
// names the broker address, what failed and the key to check, without
// the password.
func secureErrors(t *testing.T, c *kafkatest.Cluster) {
	otherCA, err := kafkatest.WriteCAFile(t.TempDir(), "other-ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	ca := c.TLS().CA
	sasl, plain := c.SASLSSLAddrs()[0], c.Addrs()[0]
	for _, tc := range []struct {
		name string
		s    secureKretry
		want []string
	}{
		{"wrong password", secureKretry{broker: sasl, tls: tlsYAML(ca, "", ""), sasl: true, password: wrongPassword},
			[]string{"SASL authentication failed", "broker " + sasl, "kafka.sasl.username", "kafka.sasl.password"}},
		{"unknown CA", secureKretry{broker: sasl, tls: tlsYAML(otherCA, "", ""), sasl: true, password: securePassword},
			[]string{"TLS: certificate signed by unknown authority", "broker " + sasl, "kafka.tls.ca_file", otherCA}},
		{"plaintext port", secureKretry{broker: plain, tls: tlsYAML(ca, "", ""), sasl: true, password: securePassword},
			[]string{"TLS handshake failed", "broker " + plain, "is " + plain + " a TLS listener?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeSecureConfig(t, tc.s, "orders-errors", "http://127.0.0.1:1/unused", "")
			for _, args := range [][]string{
				{"run", "-c", cfg},
				{"lag", "-c", cfg},
				{"parking", "release", "-c", cfg, "--topic", "orders-errors", "--key", "k"},
			} {
				name := strings.Join(args[:len(args)-2], " ")
				if args[0] == "parking" {
					name = "parking release"
				}
				start := time.Now()
				stdout, stderr, code := runKretry(t, 30*time.Second, tc.s.env(), args...)
				took := time.Since(start)
				if code != 1 {
					t.Errorf("kretry %s exited %d, want 1:\n%s", name, code, stderr)
				}
				if took > 15*time.Second {
					t.Errorf("kretry %s took %v to fail, want at most 15s", name, took.Round(time.Millisecond))
				}
				for _, w := range tc.want {
					if !strings.Contains(stderr, w) {
						t.Errorf("kretry %s: stderr lacks %q:\n%s", name, w, stderr)
					}
				}
				for _, pw := range []string{securePassword, wrongPassword} {
					if strings.Contains(stdout+stderr, pw) {
						t.Errorf("kretry %s shows a SASL password:\n%s%s", name, stdout, stderr)
					}
				}
			}
		})
	}
}

// scrape returns the body of http://addr/metrics ("" on an error).
func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// stageRecords returns the value of kretry_stage_records for source's
// stage in a /metrics body, "" when absent.
func stageRecords(metrics, source, stage string) string {
	for line := range strings.Lines(metrics) {
		if strings.HasPrefix(line, "kretry_stage_records{") &&
			strings.Contains(line, `kretry_source="`+source+`"`) && strings.Contains(line, `kretry_stage="`+stage+`"`) {
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	return ""
}

func firstValue(rs []*kgo.Record) string {
	if len(rs) == 0 {
		return ""
	}
	return string(rs[0].Value)
}
