package sidecar_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
)

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsEndpoint runs a sidecar on the embedded broker and reads its
// /metrics: pipeline counters from the engine's Observer, lag series from
// the lag monitor, beside /healthz and /readyz.
func TestMetricsEndpoint(t *testing.T) {
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
kafka: {fetch_max_wait: 50ms}
embedded: {listen: %q, data_dir: ""}
app: {url: http://127.0.0.1:1/unused}
metrics: {listen: %q}
lag: {interval: 200ms, window: 2}
topics:
  - name: orders
    ordering: none
    retry: {tiers: [1s]}
`, freePort(t), freePort(t))), nil)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan *sidecar.Sidecar, 1)
	ctx, cancel := context.WithCancel(context.Background())
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
			t.Errorf("Run: %v", err)
		}
	}()
	var s *sidecar.Sidecar
	select {
	case s = <-started:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("sidecar did not start")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 6 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	base := "http://" + cfg.Metrics.Listen
	want := []string{
		`kretry_deliveries_total{kretry_outcome="ok",kretry_source="orders",kretry_stage="source",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders"} 6`,
		`kretry_stage_records{kretry_source="orders",kretry_stage="source",messaging_destination_name="orders"} 0`,
		`kretry_stage_records{kretry_source="orders",kretry_stage="dlq",messaging_destination_name="orders.dlq"} 0`,
		`kretry_consumer_status{kretry_source="orders",kretry_stage="tier-1",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders.retry.1s",messaging_destination_partition_id="0"} 0`,
		`kretry_deliveries_in_flight{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 0`,
	}
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body = get(base + "/metrics")
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				missing = w
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s\n%s", missing, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Every source partition is caught up: lag 0 per partition.
	for p := range cfg.Embedded.Partitions {
		line := fmt.Sprintf(`kretry_consumer_lag{kretry_source="orders",kretry_stage="source",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders",messaging_destination_partition_id="%d"} 0`, p)
		if !strings.Contains(body, line+"\n") {
			t.Errorf("missing %s", line)
		}
	}
	for path, want := range map[string]string{"/healthz": "ok\n", "/readyz": "ready\n"} {
		if code, b := get(base + path); code != http.StatusOK || b != want {
			t.Errorf("GET %s: %d %q", path, code, b)
		}
	}
}
