package lag

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// instanceMetrics is /metrics of an instance with two pipelines, in the
// names and labels kretry exports (docs/METRICS.md, docs/OVERLOAD.md).
const instanceMetrics = `# TYPE kretry_breaker_state gauge
kretry_breaker_state{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 1
kretry_breaker_state{kretry_source="users",messaging_consumer_group_name="users-kretry"} 0
# TYPE kretry_breaker_opened_total counter
kretry_breaker_opened_total{kretry_reason="dependency",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 3
kretry_breaker_opened_total{kretry_reason="systemic",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 1
# TYPE kretry_deliveries_held_total counter
kretry_deliveries_held_total{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 29
# TYPE kretry_delivery_limit gauge
kretry_delivery_limit{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 3
# TYPE kretry_deliveries_in_flight gauge
kretry_deliveries_in_flight{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 2
# TYPE kretry_retry_budget_ratio gauge
kretry_retry_budget_ratio{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 0.125
# TYPE kretry_retry_budget_denied_total counter
kretry_retry_budget_denied_total{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 7
# TYPE kretry_deliveries_total counter
kretry_deliveries_total{kretry_outcome="ok",kretry_source="orders",kretry_stage="source",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders"} 60
kretry_deliveries_total{error_type="503",kretry_outcome="transient",kretry_source="orders",kretry_stage="source",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders"} 20
kretry_deliveries_total{kretry_outcome="ok",kretry_source="orders",kretry_stage="tier-1",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders.retry.1m"} 15
kretry_deliveries_total{error_type="503",kretry_outcome="transient",kretry_source="orders",kretry_stage="tier-2",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders.retry.10m"} 5
# TYPE kretry_moves_total counter
kretry_moves_total{kretry_error_class="exhausted",kretry_move_kind="dead-letter",kretry_source="orders",kretry_stage="dlq",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders.dlq"} 2
kretry_moves_total{kretry_error_class="permanent",kretry_move_kind="dead-letter",kretry_source="orders",kretry_stage="dlq",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders.dlq"} 1
kretry_moves_total{kretry_move_kind="retry",kretry_source="orders",kretry_stage="tier-1",messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders.retry.1m"} 20
# TYPE kretry_delivery_failures_total counter
kretry_delivery_failures_total{error_type="503",kretry_error_class="transient",kretry_error_fingerprint="status #: busy",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 25
kretry_delivery_failures_total{error_type="404",kretry_error_class="permanent",kretry_error_fingerprint="order # not found",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 40
# TYPE kretry_dependency_state gauge
kretry_dependency_state{url_full="http://127.0.0.1:8080/kafka"} 1
# TYPE go_goroutines gauge
go_goroutines 42
`

func TestReadInstance(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			w.Write([]byte(instanceMetrics))
		case "/html":
			w.Write([]byte("<html>not metrics {{</html>"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	in, err := ReadInstance(t.Context(), srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Pipelines) != 2 || in.Pipelines[0].Source != "orders" || in.Pipelines[1].Source != "users" {
		t.Fatalf("pipelines %+v, want orders and users (the dependency state is no pipeline's)", in.Pipelines)
	}
	p := in.Pipelines[0]
	if p.Breaker != 1 || p.Opened["dependency"] != 3 || p.Opened["systemic"] != 1 || p.Held != 29 || p.Limit != 3 || p.InFlight != 2 {
		t.Errorf("breaker %d opened %v held %v limit %v in flight %v; want 1, 3+1, 29, 3, 2", p.Breaker, p.Opened, p.Held, p.Limit, p.InFlight)
	}
	if p.BudgetRatio != 0.125 || p.BudgetDenied != 7 || p.Deliveries != 100 || p.Retries != 20 || p.DeadLettered != 3 {
		t.Errorf("budget %v/%v deliveries %v retries %v dead-lettered %v; want 0.125/7, 100, 20 (tier stages), 3 (dead-letter moves only)",
			p.BudgetRatio, p.BudgetDenied, p.Deliveries, p.Retries, p.DeadLettered)
	}
	if len(p.Failures) != 2 || p.Failures[0].Fingerprint != "order # not found" || p.Failures[0].Type != "404" || p.Failures[0].Class != "permanent" || p.Failures[0].Count != 40 {
		t.Errorf("failures %+v, want the 404 fingerprint (40) first", p.Failures)
	}
	if share, ok := p.RetryShare(nil); !ok || share != 0.2 {
		t.Errorf("retry share since start %v %v, want 0.2", share, ok)
	}
	earlier := p
	earlier.Deliveries, earlier.Retries = 90, 18
	if share, ok := p.RetryShare(&earlier); !ok || share != 0.2 {
		t.Errorf("retry share over the interval %v %v, want 2/10", share, ok)
	}
	if _, ok := p.RetryShare(&p); ok {
		t.Error("a retry share over an interval without deliveries")
	}
	if q := in.Pipelines[1]; q.Breaker != 0 || q.Deliveries != 0 || len(q.Failures) != 0 {
		t.Errorf("users: %+v, want closed with nothing else", q)
	}
	if in.Find("orders-kretry", "orders") == nil || in.Find("x", "orders") != nil {
		t.Error("Find by group and source")
	}
	for path, want := range map[string]string{"/nothing": "answered 404", "/html": "not the Prometheus text format"} {
		if _, err := ReadInstance(t.Context(), srv.URL+path); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming the URL and %q", path, err, want)
		}
	}
}
