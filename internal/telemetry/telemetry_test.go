package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kretry/kretry/internal/telemetry"
	"github.com/kretry/kretry/pkg/engine"
)

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func wantLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, l+"\n") {
			t.Errorf("missing line %q", l)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
}

func TestPipelineMetrics(t *testing.T) {
	tel, err := telemetry.New(telemetry.Options{ServiceVersion: "test", InstanceID: "pod-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	obs := tel.Observer()

	// Concurrent events: the Observer is called from the engine's
	// goroutines.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				obs.Delivered(engine.DeliveryEvent{Group: "orders-kretry", Topic: "orders", Partition: 1, Source: "orders",
					Stage: "source", Outcome: "ok", Status: 200, Duration: 20 * time.Millisecond, Attempt: 1})
			}
		})
	}
	wg.Wait()
	obs.Delivered(engine.DeliveryEvent{Group: "orders-kretry", Topic: "orders", Source: "orders", Stage: "source",
		Outcome: "transient", Status: 503, ErrorType: "503", Duration: 2 * time.Second, Attempt: 1})
	obs.Delivered(engine.DeliveryEvent{Group: "orders-kretry", Topic: "orders.retry.1m", Source: "orders", Stage: "tier-1",
		Outcome: "permanent", Status: 422, ErrorType: "422", Duration: 30 * time.Millisecond, Attempt: 2})
	obs.Moved(engine.MoveEvent{Group: "orders-kretry", Source: "orders", From: "orders", To: "orders.retry.1m",
		Kind: "retry", Class: "transient", Stage: "tier-1"})
	obs.Moved(engine.MoveEvent{Group: "orders-kretry", Source: "orders", From: "orders.retry.1m", To: "orders.dlq",
		Kind: "dead-letter", Class: "permanent", Stage: "dlq"})
	obs.Committed(engine.CommitEvent{Group: "orders-kretry", Source: "orders", Committed: true, Records: 102, Duration: 40 * time.Millisecond})
	obs.Committed(engine.CommitEvent{Group: "orders-kretry", Source: "orders", Committed: false, Records: 3, Duration: time.Second})
	var inFlight, held int64 = 7, 2
	stop := tel.Pipeline().ObserveEngine("orders-kretry", "orders", telemetry.EngineGauges{
		InFlight: func() int64 { return inFlight }, HeldKeys: func() int64 { return held }})

	body := scrape(t, tel.Handler())
	src := `kretry_source="orders",kretry_stage="source",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders"`
	wantLines(t, body, // labels in the exporter's (sorted) order
		`kretry_deliveries_total{kretry_outcome="ok",`+src+`} 100`,
		`kretry_deliveries_total{error_type="503",kretry_outcome="transient",`+src+`} 1`,
		`messaging_process_duration_seconds_count{messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders",messaging_operation_name="process",messaging_system="kafka"} 100`,
		`messaging_process_duration_seconds_bucket{messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders",messaging_operation_name="process",messaging_system="kafka",le="0.025"} 100`,
		`messaging_process_duration_seconds_count{error_type="503",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders",messaging_operation_name="process",messaging_system="kafka"} 1`,
		`kretry_moves_total{kretry_error_class="transient",kretry_move_kind="retry",kretry_source="orders",kretry_stage="tier-1",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders.retry.1m"} 1`,
		`kretry_moves_total{kretry_error_class="permanent",kretry_move_kind="dead-letter",kretry_source="orders",kretry_stage="dlq",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders.dlq"} 1`,
		`kretry_transactions_total{kretry_outcome="committed",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 1`,
		`kretry_transactions_total{kretry_outcome="aborted",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 1`,
		`kretry_transaction_records_total{kretry_outcome="committed",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 102`,
		`kretry_deliveries_in_flight{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 7`,
		`kretry_parking_held_keys{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 2`,
		`kretry_delivery_attempt_bucket{kretry_outcome="ok",kretry_source="orders",messaging_consumer_group_name="orders-kretry",le="1"} 100`,
		`kretry_delivery_attempt_bucket{kretry_outcome="permanent",kretry_source="orders",messaging_consumer_group_name="orders-kretry",le="1"} 0`,
		`kretry_delivery_attempt_bucket{kretry_outcome="permanent",kretry_source="orders",messaging_consumer_group_name="orders-kretry",le="2"} 1`,
		`kretry_delivery_attempt_sum{kretry_outcome="permanent",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 2`,
		`target_info{service_instance_id="pod-1",service_name="kretry",service_version="test"} 1`,
	)
	if !strings.Contains(body, "go_goroutines") {
		t.Error("no Go runtime metrics")
	}
	if strings.Contains(body, "otel_scope_name") {
		t.Error("series carry the instrumentation scope")
	}
	if strings.Contains(body, "kretry_parking_blocked_keys{") {
		t.Error("blocked keys reported without a source")
	}
	stop()
	if body := scrape(t, tel.Handler()); strings.Contains(body, "kretry_deliveries_in_flight{") {
		t.Error("in-flight gauge still reported after stop")
	}
}

func TestNilTelemetry(t *testing.T) {
	var tel *telemetry.Telemetry
	if tel.Observer() != nil {
		t.Error("nil Telemetry: Observer() is not a nil interface")
	}
	if tel.MeterProvider() != nil || tel.Pipeline() != nil || tel.Shutdown(context.Background()) != nil {
		t.Error("nil Telemetry is not inert")
	}
	rec := httptest.NewRecorder()
	tel.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Telemetry /metrics: %d", rec.Code)
	}
}

func BenchmarkDelivered(b *testing.B) {
	tel, err := telemetry.New(telemetry.Options{NoRuntimeMetrics: true})
	if err != nil {
		b.Fatal(err)
	}
	obs := tel.Observer()
	ev := engine.DeliveryEvent{Group: "g", Topic: "orders", Source: "orders", Stage: "source", Outcome: "ok", Duration: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			obs.Delivered(ev)
		}
	})
}
