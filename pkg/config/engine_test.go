package config_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// TestEngineOptions: one loaded topic becomes the engine options `kretry
// run` uses, with the plan the lag monitor reads.
func TestEngineOptions(t *testing.T) {
	c, err := config.Parse([]byte(`
kafka: {brokers: ["127.0.0.1:9092"], instance_id: pod-3, transactional_id: tx, session_timeout: 30s}
app: {url: "http://127.0.0.1:8080/", timeout: 3s, max_in_flight: 7}
topics:
  - name: orders
    retry: {tiers: [1s, 1m], jitter: 0.5}
    parking: {max_records: 12}
    on_dead_letter: hold
  - name: events
    ordering: none
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	o := c.EngineOptions(&c.Topics[0])
	wantPlan := retrytopics.Plan{Source: "orders", DLQ: "orders.dlq", Jitter: 0.5, Tiers: []retrytopics.Tier{
		{Topic: "orders.retry.1s", Delay: time.Second}, {Topic: "orders.retry.1m", Delay: time.Minute},
	}}
	if o.Plan.Source != wantPlan.Source || o.Plan.DLQ != wantPlan.DLQ || o.Plan.Jitter != wantPlan.Jitter || len(o.Plan.Tiers) != 2 ||
		o.Plan.Tiers[0] != wantPlan.Tiers[0] || o.Plan.Tiers[1] != wantPlan.Tiers[1] {
		t.Errorf("plan %+v, want %+v", o.Plan, wantPlan)
	}
	if o.Group != "orders-kretry" || o.TransactionalID != "tx-pod-3-orders-kretry" || o.InstanceID != "pod-3" {
		t.Errorf("group %q, transactional id %q, instance %q", o.Group, o.TransactionalID, o.InstanceID)
	}
	if o.MaxInFlight != 7 || o.DeliveryTimeout != 3*time.Second || o.FetchMaxWait != flow.DefaultFetchMaxWait {
		t.Errorf("in flight %d, timeout %s, fetch wait %s", o.MaxInFlight, o.DeliveryTimeout, o.FetchMaxWait)
	}
	if o.Ordering != flow.OrderingKey || o.ParkingTopic != "orders.parking" || o.OnDeadLetter != flow.OnDeadLetterHold || o.MaxParked != 12 {
		t.Errorf("ordering %q, parking %q, on dead letter %q, max parked %d", o.Ordering, o.ParkingTopic, o.OnDeadLetter, o.MaxParked)
	}
	if o.Statuses == nil || len(o.Statuses.Permanent) != len(flow.DefaultPermanent()) || len(o.GroupOpts) != 2 {
		t.Errorf("statuses %v, group opts %d", o.Statuses, len(o.GroupOpts))
	}
	if n := c.EngineOptions(&c.Topics[1]); n.Ordering != flow.OrderingNone || n.ParkingTopic != "" {
		t.Errorf("ordering none: ordering %q, parking %q; want no parking topic", n.Ordering, n.ParkingTopic)
	}
}

// OverloadGate builds kretry run's gate from the config: app.max_in_flight
// auto starts the adaptive limit at AutoInitialInFlight; a fixed number is
// the limit; the breaker's window comes from the topic's breaker keys.
func TestOverloadGate(t *testing.T) {
	c, err := config.Parse([]byte(`
kafka: {brokers: ["127.0.0.1:9092"]}
app: {url: "http://127.0.0.1:8080/", max_in_flight: auto}
topics:
  - name: orders
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := c.OverloadGate(&c.Topics[0], slog.New(slog.DiscardHandler))
	if s := g.Snapshot(time.Now()); s.Limit != config.AutoInitialInFlight || s.State != overload.Closed {
		t.Errorf("auto: %+v, want limit %d, closed", s, config.AutoInitialInFlight)
	}
	c.App.MaxInFlight = config.InFlight(7)
	if s := c.OverloadGate(&c.Topics[0], slog.New(slog.DiscardHandler)).Snapshot(time.Now()); s.Limit != 7 {
		t.Errorf("max_in_flight 7: limit %d", s.Limit)
	}
}
