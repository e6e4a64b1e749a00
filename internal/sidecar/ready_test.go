package sidecar_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
)

// startSidecar runs a sidecar on brokers with its /readyz on a free port;
// it returns the readyz URL and a channel closed when Started is called.
func startSidecar(t *testing.T, brokers, txnID string) (readyz string, started <-chan struct{}) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
kafka: {brokers: [%q], transactional_id: %q, session_timeout: 6s}
app: {url: http://127.0.0.1:1/unused}
metrics: {listen: %q}
lag: {interval: 0s}
topics:
  - name: orders
    ordering: none
    retry: {tiers: [1s]}
`, brokers, txnID, freePort(t))), nil)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, cfg, sidecar.Options{
			Logger:    slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil }),
			Started:   func(*sidecar.Sidecar) { close(ch) },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return "http://" + cfg.Metrics.Listen + "/readyz", ch
}

func waitReady(t *testing.T, url string, started <-chan struct{}, within time.Duration) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(within):
		t.Fatalf("not started within %v", within)
	}
	if code, body := get(url); code != http.StatusOK || body != "ready\n" {
		t.Fatalf("GET /readyz after Started: %d %q, want 200", code, body)
	}
}

// TestReadyAfterFirstAssignment: /readyz stays 503 while the engine
// cannot join its group (another member holds the rebalance up) and turns
// 200 once it has its first assignment; Started is called then, not
// before.
func TestReadyAfterFirstAssignment(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	addr := b.Addrs()[0]
	ctx := context.Background()
	adm, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := adm.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// The blocker joins orders-kretry first and, having polled a record,
	// holds every rebalance until AllowRebalance: the sidecar's engine
	// cannot get an assignment meanwhile.
	assigned := make(chan struct{}, 1)
	blocker, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("orders-kretry"), kgo.ConsumeTopics("orders"),
		kgo.Balancers(kgo.RangeBalancer()), kgo.BlockRebalanceOnPoll(), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
			select {
			case assigned <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		blocker.AllowRebalance() // Close would wait for it
		blocker.Close()
	}()
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if fs := blocker.PollFetches(pctx); len(fs.Records()) != 1 {
		t.Fatalf("blocker polled %v (errors %v), want the record", fs.Records(), fs.Errors())
	}
	<-assigned

	readyz, started := startSidecar(t, addr, "kretry-a")
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if code, body := get(readyz); code != http.StatusServiceUnavailable {
			if code != 0 { // 0: the endpoint is not listening yet
				t.Fatalf("GET /readyz before the first assignment: %d %q, want 503", code, body)
			}
		}
		select {
		case <-started:
			t.Fatal("Started was called before the first assignment")
		default:
		}
		time.Sleep(50 * time.Millisecond)
	}

	blocker.AllowRebalance()
	blocker.Close() // leaves the group: the rebalance completes at once
	waitReady(t, readyz, started, 20*time.Second)
}

// TestReadyWithNoPartitions: with more instances than partitions, the
// instance assigned nothing is ready too (it is a member, standing by).
func TestReadyWithNoPartitions(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	addr := b.Addrs()[0]
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	readyA, startedA := startSidecar(t, addr, "kretry-a")
	waitReady(t, readyA, startedA, 20*time.Second)
	readyB, startedB := startSidecar(t, addr, "kretry-b")
	waitReady(t, readyB, startedB, 30*time.Second)
}
