package lag_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/kretry/kretry/lag"
)

// points collects a reader's gauge points as "name{k=v,…}" → value.
func points(t *testing.T, r *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, set attribute.Set) string {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, fmt.Sprintf("%s=%s", a.Key, a.Value.Emit()))
		}
		slices.Sort(kv)
		return name + "{" + strings.Join(kv, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = p.Value
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			}
		}
	}
	return out
}

func TestMetricsPerPartition(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 2)
	c.createTopic("orders.retry.1m", 2)
	c.createTopic("orders.dlq", 2)
	c.createTopic("events", 1)
	old := time.Now().Add(-90 * time.Second).Truncate(time.Millisecond)
	c.produce("orders", 0, 10, old)
	c.produce("orders.retry.1m", 1, 2, old)
	c.produce("events", 0, 3, old)
	c.commit("orders-kretry", "orders", 0, 7)
	c.commit("orders-kretry", "orders", 1, 0)
	c.commit("app", "events", 0, 1)

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	clock := &fixedClock{t: time.Now()}
	cfg := lag.Config{
		PerPartition: true,
		Groups: []lag.Group{
			{Name: "orders-kretry", ReadCommitted: true, Topics: []lag.Topic{
				{Name: "orders", Source: "orders", Stage: lag.StageSource},
				{Name: "orders.retry.1m", Source: "orders", Stage: lag.TierStage(1), Wait: 72 * time.Second},
			}},
			{Name: "app"},
		},
		DLQs: []lag.DLQ{{Topic: "orders.dlq", Source: "orders"}},
	}
	m := c.monitor(cfg, lag.WithMeterProvider(mp), lag.WithClock(clock.now))
	if got := points(t, reader); len(got) != 0 {
		t.Errorf("points before the first scan: %v", got)
	}
	scan(t, m)
	got := points(t, reader)
	age := clock.t.Sub(old).Seconds()
	src := "kretry.source=orders,kretry.stage=source,messaging.consumer.group.name=orders-kretry,messaging.destination.name=orders"
	tier := "kretry.source=orders,kretry.stage=tier-1,messaging.consumer.group.name=orders-kretry,messaging.destination.name=orders.retry.1m"
	app := "messaging.consumer.group.name=app,messaging.destination.name=events,messaging.destination.partition.id=0"
	for k, v := range map[string]float64{
		"kretry.consumer.lag{" + src + ",messaging.destination.partition.id=0}":     3,
		"kretry.consumer.lag{" + src + ",messaging.destination.partition.id=1}":     0,
		"kretry.consumer.lag.age{" + src + ",messaging.destination.partition.id=0}": age,
		"kretry.consumer.lag.age{" + src + ",messaging.destination.partition.id=1}": 0,
		"kretry.consumer.offset{" + src + ",messaging.destination.partition.id=0}":  7,
		"kretry.consumer.status{" + src + ",messaging.destination.partition.id=0}":  0,
		"kretry.consumer.lag{" + tier + ",messaging.destination.partition.id=1}":    2,
		"kretry.consumer.lag{kretry.source=orders,kretry.stage=tier-1,messaging.consumer.group.name=orders-kretry,messaging.destination.name=orders.retry.1m,messaging.destination.partition.id=0}": 0,
		"kretry.consumer.lag{" + app + "}":     2,
		"kretry.consumer.lag.age{" + app + "}": age,
		"kretry.partition.end_offset{messaging.destination.name=orders,messaging.destination.partition.id=0}":       10,
		"kretry.partition.start_offset{messaging.destination.name=orders,messaging.destination.partition.id=0}":     0,
		"kretry.partition.end_offset{messaging.destination.name=orders.dlq,messaging.destination.partition.id=1}":   0,
		"kretry.stage.records{kretry.source=orders,kretry.stage=source,messaging.destination.name=orders}":          3,
		"kretry.stage.records{kretry.source=orders,kretry.stage=tier-1,messaging.destination.name=orders.retry.1m}": 2,
		"kretry.stage.age{kretry.source=orders,kretry.stage=tier-1,messaging.destination.name=orders.retry.1m}":     age,
		"kretry.stage.records{kretry.source=orders,kretry.stage=dlq,messaging.destination.name=orders.dlq}":         0,
		"kretry.stage.age{kretry.source=orders,kretry.stage=dlq,messaging.destination.name=orders.dlq}":             0,
		"kretry.lag.scans{}": 1,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}
	if t.Failed() {
		for k, v := range got {
			t.Logf("%s %v", k, v)
		}
	}

	// The app group is deleted, the events topic too: their series go.
	c.deleteTopic("events")
	if _, err := c.adm.DeleteGroup(context.Background(), "app"); err != nil {
		t.Fatal(err)
	}
	scan(t, m)
	for k := range points(t, reader) {
		if strings.Contains(k, "=app") || strings.Contains(k, "=events") {
			t.Errorf("series of a deleted group or topic remains: %s", k)
		}
	}
}

func TestMetricsPerTopic(t *testing.T) {
	c := newCluster(t)
	c.createTopic("events", 3)
	old := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for p := range int32(3) {
		c.produce("events", p, 5, old.Add(time.Duration(p)*time.Second))
		c.commit("app", "events", p, int64(p))
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	clock := &fixedClock{t: time.Now()}
	m := c.monitor(lag.Config{Groups: []lag.Group{{Name: "app"}}}, lag.WithMeterProvider(mp), lag.WithClock(clock.now))
	scan(t, m)
	got := points(t, reader)
	attrs := "{messaging.consumer.group.name=app,messaging.destination.name=events}"
	want := map[string]float64{
		"kretry.consumer.lag" + attrs:     5 + 4 + 3,
		"kretry.consumer.lag.age" + attrs: clock.t.Sub(old).Seconds(), // the oldest partition
		"kretry.consumer.status" + attrs:  0,
		"kretry.lag.scans{}":              1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series in per-topic mode: %s", k)
		}
	}
}
