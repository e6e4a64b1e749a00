package sidecar_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/internal/testlog"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
)

// TestLogsIdentity: at start the sidecar logs, per topic, the instance id
// and the transactional id its engine uses.
func TestLogsIdentity(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
kafka: {brokers: [%q], transactional_id: kretry, instance_id: pod-7, session_timeout: 6s}
app: {url: http://127.0.0.1:1/unused}
metrics: {listen: ""}
lag: {interval: 0s}
topics:
  - name: orders
    ordering: none
    retry: {tiers: [1s]}
`, b.Addrs()[0])), nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf testlog.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = sidecar.Run(ctx, cfg, sidecar.Options{
		Logger:    slog.New(slog.NewTextHandler(&buf, nil)),
		Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil }),
		Started:   func(*sidecar.Sidecar) { cancel() },
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := "instance_id=pod-7 transactional_id=" + sidecar.TransactionalID("kretry", "pod-7", cfg.Topics[0].Group)
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("log has no %q:\n%s", want, buf.String())
	}
}
