package telemetry_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/telemetry"
	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/pkg/engine"
)

// TestRulesUseExportedNames: every metric the shipped alert rules read is
// one kretry exports under that name (a rename would silence an alert).
func TestRulesUseExportedNames(t *testing.T) {
	rules, err := os.ReadFile("../../deploy/prometheus/kretry-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"orders", "orders.dlq"} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	tel, err := telemetry.New(telemetry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(ctx)
	m, err := lag.New(cl, lag.Config{
		PerPartition: true,
		Groups:       []lag.Group{{Name: "orders-kretry", ReadCommitted: true, Topics: []lag.Topic{{Name: "orders", Source: "orders", Stage: lag.StageSource}}}},
		DLQs:         []lag.DLQ{{Topic: "orders.dlq", Source: "orders"}},
	}, lag.WithMeterProvider(tel.MeterProvider()), lag.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	obs := tel.Observer()
	obs.Delivered(engine.DeliveryEvent{Group: "orders-kretry", Topic: "orders", Source: "orders", Stage: "source", Outcome: "ok", Duration: time.Millisecond})
	obs.Moved(engine.MoveEvent{Group: "orders-kretry", Source: "orders", To: "orders.retry.1m", Kind: "retry", Class: "transient", Stage: "tier-1"})
	obs.Moved(engine.MoveEvent{Group: "orders-kretry", Source: "orders", To: "orders.dlq", Kind: "dead-letter", Class: "permanent", Stage: "dlq"})
	defer tel.Pipeline().ObserveEngine("orders-kretry", "orders", telemetry.EngineGauges{HeldKeys: func() int64 { return 1 }})()
	body := scrape(t, tel.Handler())

	for _, name := range []string{
		"kretry_consumer_lag",
		"kretry_consumer_lag_age_seconds",
		"kretry_consumer_status",
		"kretry_stage_records",
		"kretry_moves_total",
		"kretry_deliveries_total",
		"kretry_parking_held_keys",
	} {
		if !strings.Contains(string(rules), name) {
			t.Errorf("the rules do not use %s any more: update this list", name)
		}
		if !strings.Contains(body, "\n"+name+"{") {
			t.Errorf("%s is not exported", name)
		}
	}
	for _, label := range []string{"messaging_consumer_group_name", "messaging_destination_name", "messaging_destination_partition_id", "kretry_source", "kretry_stage", "kretry_move_kind"} {
		if !strings.Contains(body, label+`="`) {
			t.Errorf("label %s is not exported", label)
		}
	}
}
