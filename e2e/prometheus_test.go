package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
)

// TestPrometheus has a real Prometheus scrape kretry's /metrics every
// second and evaluate the shipped rules (deploy/prometheus/kretry-rules.yaml,
// with their `for:` shortened to 2s), then checks through the Prometheus
// HTTP API that the lag series carry the right values and that
// KretryConsumerStatusNotOK fires once a consumer stops. kretry runs
// in-process (sidecar.Run) on its embedded broker; the lag monitor scans
// every 300ms with a window of 3 scans and watches the foreign group "app".
func TestPrometheus(t *testing.T) {
	brokerIndependent(t) // kretry on its embedded broker, in-process
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (Debian package prometheus): the metrics are not checked against a real Prometheus")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// kretry, delivering to an in-process handler that acknowledges all.
	metricsAddr := promFreeAddr(t)
	cfg, err := config.Parse(fmt.Appendf(nil, `
kafka: {fetch_max_wait: 50ms}
embedded: {listen: %q, data_dir: "", partitions: 1}
app: {url: http://127.0.0.1:1/unused}
metrics: {listen: %q}
lag: {interval: 300ms, window: 3, timeout: 2s, groups: [{name: app}]}
topics:
  - name: orders
    retry: {tiers: [1m]}
`, promFreeAddr(t), metricsAddr), nil)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan *sidecar.Sidecar, 1)
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, cfg, sidecar.Options{
			Logger:    slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil }),
			Started:   func(s *sidecar.Sidecar) { started <- s },
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sidecar.Run: %v", err)
		}
	}()
	var sc *sidecar.Sidecar
	select {
	case sc = <-started:
	case err := <-done:
		t.Fatalf("sidecar.Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("kretry did not start within 30s")
	}

	// Prometheus, scraping kretry and evaluating the shipped rules.
	prom := startPrometheus(t, promBin, metricsAddr)

	// The app's consumer group reads 10 records of "events" and commits.
	cl, err := kgo.NewClient(kgo.SeedBrokers(sc.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "events"); err != nil {
		t.Fatal(err)
	}
	produce := func(topic string, n int) {
		t.Helper()
		for i := range n {
			r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce("events", 10)
	produce("orders", 3)
	consumer, err := kgo.NewClient(kgo.SeedBrokers(sc.Brokers...), kgo.ConsumerGroup("app"), kgo.ConsumeTopics("events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	readBy := time.Now().Add(15 * time.Second)
	for got := 0; got < 10; {
		if time.Now().After(readBy) {
			t.Fatalf("the app's consumer read %d of 10 records in 15s", got)
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		got += consumer.PollFetches(pctx).NumRecords()
		pcancel()
	}
	if err := consumer.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}

	const app = `messaging_consumer_group_name="app",messaging_destination_name="events",messaging_destination_partition_id="0"`
	prom.waitValue(t, `up{job="kretry"}`, 1)
	prom.waitValue(t, `kretry_consumer_lag{`+app+`}`, 0)
	prom.waitValue(t, `kretry_consumer_offset{`+app+`}`, 10)
	prom.waitValue(t, `kretry_consumer_status{`+app+`}`, 0)
	prom.waitValue(t, `sum(kretry_deliveries_total{kretry_source="orders",kretry_outcome="ok"})`, 3)
	prom.waitValue(t, `sum(kretry_consumer_lag{messaging_consumer_group_name="orders-kretry",kretry_stage="source"})`, 0)
	if a := prom.alerts(t); len(a) != 0 {
		t.Fatalf("alerts while all is well: %+v", a)
	}

	// The consumer stops (it leaves the group, which keeps its commit);
	// records keep arriving. The lag grows, measured against each scan's
	// end offset; after a window of scans the status is STOP and the alert
	// fires.
	consumer.Close()
	produce("events", 7)
	prom.waitValue(t, `kretry_partition_end_offset{messaging_destination_name="events",messaging_destination_partition_id="0"}`, 17)
	prom.waitValue(t, `kretry_consumer_lag{`+app+`}`, 7)
	prom.waitValue(t, `kretry_consumer_offset{`+app+`}`, 10)
	prom.waitValue(t, `kretry_consumer_status{`+app+`}`, 3)
	if v := prom.value(t, `kretry_consumer_lag_age_seconds{`+app+`}`); v <= 0 || v > 60 {
		t.Errorf("lag age = %v s, want the age of the first unread record", v)
	}
	promWait(t, 30*time.Second, "KretryConsumerStatusNotOK firing for app", func() (bool, string) {
		alerts := prom.alerts(t)
		for _, a := range alerts {
			if a.Labels["alertname"] == "KretryConsumerStatusNotOK" && a.State == "firing" &&
				a.Labels["messaging_consumer_group_name"] == "app" && a.Labels["messaging_destination_name"] == "events" &&
				a.Labels["severity"] == "critical" && a.Annotations["summary"] == "app on events is STOP (nobody consumes)" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("alerts: %+v", alerts)
	})
}

// promServer is a running Prometheus.
type promServer struct {
	base string
}

type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

// startPrometheus runs Prometheus with a temporary config and TSDB,
// scraping target every second and loading the shipped rules with `for:`
// shortened to 2s. It is stopped when the test ends.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "kretry-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rules = regexp.MustCompile(`(?m)^(\s+for:) \S+$`).ReplaceAll(rules, []byte("$1 2s"))
	promWrite(t, filepath.Join(dir, "rules.yaml"), rules)
	promWrite(t, filepath.Join(dir, "prometheus.yml"), fmt.Appendf(nil, `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yaml]
scrape_configs:
  - job_name: kretry
    static_configs:
      - targets: [%q]
`, target))
	addr := promFreeAddr(t)
	var logs promBuffer
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logs.String())
		}
	})
	p := &promServer{base: "http://" + addr}
	promWait(t, 30*time.Second, "prometheus ready", func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("prometheus exited: %s", logs.String())
		default:
		}
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return p
}

// query runs an instant query and returns the values of its result vector.
func (p *promServer) query(t *testing.T, q string) ([]float64, error) {
	t.Helper()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	var out []float64
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// waitValue waits until q has exactly one sample, equal to want.
func (p *promServer) waitValue(t *testing.T, q string, want float64) {
	t.Helper()
	promWait(t, 30*time.Second, fmt.Sprintf("%s == %v", q, want), func() (bool, string) {
		vs, err := p.query(t, q)
		if err != nil {
			return false, err.Error()
		}
		return len(vs) == 1 && vs[0] == want, fmt.Sprintf("got %v", vs)
	})
}

// value returns the one sample of q.
func (p *promServer) value(t *testing.T, q string) float64 {
	t.Helper()
	vs, err := p.query(t, q)
	if err != nil || len(vs) != 1 {
		t.Fatalf("%s: %v %v", q, vs, err)
	}
	return vs[0]
}

func (p *promServer) alerts(t *testing.T) []promAlert {
	t.Helper()
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/alerts", &r); err != nil {
		t.Fatal(err)
	}
	return r.Data.Alerts
}

func (p *promServer) get(path string, v any) error {
	resp, err := http.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// promWait polls cond every 200ms until it holds, failing the test after
// timeout with cond's last explanation.
func promWait(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func promFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func promWrite(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

type promBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *promBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *promBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
