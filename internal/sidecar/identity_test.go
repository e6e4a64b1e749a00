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
	out := startedLog(t, cfg)
	want := "instance_id=pod-7 transactional_id=" + sidecar.TransactionalID("kretry", "pod-7", cfg.Topics[0].Group)
	if !strings.Contains(out, want) {
		t.Fatalf("log has no %q:\n%s", want, out)
	}
}

// startedLog runs the sidecar on cfg until it has started and returns
// what it logged.
func startedLog(t *testing.T, cfg *config.Config) string {
	t.Helper()
	var buf testlog.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := sidecar.Run(ctx, cfg, sidecar.Options{
		Logger:    slog.New(slog.NewTextHandler(&buf, nil)),
		Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil }),
		Started:   func(*sidecar.Sidecar) { cancel() },
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return buf.String()
}

// TestLogsACreatedSource: on the embedded broker a missing source topic is
// created, and the log says so, naming it, so a mistyped topics[].name is
// seen (a newcomer's "ordres" was consumed silently, empty). The second
// start, on the same data dir, finds it and says nothing of it.
func TestLogsACreatedSource(t *testing.T) {
	dir := t.TempDir()
	start := func() string {
		cfg, err := config.Parse(fmt.Appendf(nil, `
embedded: {listen: %q, data_dir: %q, partitions: 2}
app: {url: http://127.0.0.1:1/unused}
metrics: {listen: ""}
lag: {interval: 0s}
topics:
  - name: ordres
    retry: {tiers: [1s]}
`, freePort(t), dir), nil)
		if err != nil {
			t.Fatal(err)
		}
		return startedLog(t, cfg)
	}
	const line = "created the source topic on the embedded broker"
	if out := start(); !strings.Contains(out, line) || !strings.Contains(out, "topic=ordres partitions=2") {
		t.Errorf("first start: no %q naming ordres and its 2 partitions:\n%s", line, out)
	}
	if out := start(); strings.Contains(out, line) {
		t.Errorf("second start, the topic in place: %q logged again:\n%s", line, out)
	}
}
