package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/telemetry"
	"github.com/kretry/kretry/pkg/config"
)

// clientCount counts the Kafka clients made (each also sent on newc) and
// closed with its hook.
type clientCount struct {
	made, closed atomic.Int64
	newc         chan struct{}
}

func (c *clientCount) OnNewClient(*kgo.Client)    { c.made.Add(1); c.newc <- struct{}{} }
func (c *clientCount) OnClientClosed(*kgo.Client) { c.closed.Add(1) }

// TestDLQMetricsStopClosesItsReaders: the stop of the DLQ metrics returns
// only once every DLQ reader it started is closed. A reader closed after
// it, as the sidecar's stops close the embedded broker next, logged
// "read from broker errored … (is SASL missing?)" after "kretry stopped
// cleanly" (a newcomer run).
func TestDLQMetricsStopClosesItsReaders(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
kafka: {brokers: [%q]}
app: {url: http://127.0.0.1:1/unused}
topics: [{name: orders}, {name: payments}]
`, b.Addrs()[0])), nil)
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.New(telemetry.Options{InstanceID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	count := clientCount{newc: make(chan struct{}, 16)}
	opts := []kgo.Opt{kgo.SeedBrokers(b.Addrs()...), kgo.WithHooks(&count)}
	stop, err := startDLQMetrics(context.Background(), cfg, &observability{tel: tel}, opts, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // each topic's client and its tracker's reader
		select {
		case <-count.newc:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d Kafka clients made in 30s, want 4", count.made.Load())
		}
	}
	stop()
	if made, closed := count.made.Load(), count.closed.Load(); closed != made {
		t.Fatalf("%d of %d Kafka clients closed when the stop returned", closed, made)
	}
}
