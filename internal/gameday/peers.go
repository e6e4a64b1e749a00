package gameday

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/blocking"
	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
)

// kretryPeer runs the sidecar as `kretry run` does (sidecar.Run), with the
// config a user would write for this app (its keys are in the report).
type kretryPeer struct{}

// kretryConfig returns the kretry config the game day runs with.
func kretryConfig(e *env, metrics string) (*config.Config, error) {
	cfg := config.Default()
	cfg.Kafka.Brokers = e.addrs
	cfg.Kafka.FetchMaxWait = 50 * time.Millisecond
	cfg.Kafka.InstanceID = e.prefix
	cfg.App.URL = e.app.url
	cfg.App.Timeout = e.plan.AppTimeout
	cfg.App.MaxInFlight = config.InFlight(e.plan.MaxInFlight)
	cfg.Metrics.Listen = metrics
	cfg.Lag.Interval = time.Second
	jitter := e.plan.Jitter
	// The retry budget the check holds kretry to (off by default in
	// kretry); the breaker and the guard are on by default.
	budget := config.RetryBudget{Ratio: e.plan.BudgetRatio, MinPerSecond: &e.plan.BudgetPerSecond, Window: e.plan.BudgetWindow}
	cfg.Topics = []config.Topic{{Name: e.topic, Retry: config.Retry{Tiers: e.plan.Tiers, Jitter: &jitter, Budget: budget}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("game day kretry config: %w", err)
	}
	return cfg, nil
}

func (kretryPeer) start(ctx context.Context, e *env) (started, error) {
	addr, err := freeAddr()
	if err != nil {
		return started{}, err
	}
	cfg, err := kretryConfig(e, addr)
	if err != nil {
		return started{}, err
	}
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, cfg, sidecar.Options{Logger: e.log, Started: func(*sidecar.Sidecar) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		return started{}, fmt.Errorf("kretry stopped while starting: %w", err)
	case <-ctx.Done():
		return started{}, ctx.Err()
	}
	lc := lag.FromConfig(cfg)
	lc.Timeout, lc.Window = 2*time.Second, 2
	t := &cfg.Topics[0]
	setup := fmt.Sprintf("app.max_in_flight %v, app.timeout %v, ordering %s, retry.tiers %v, retry.jitter %v, retry.budget {ratio %v, min_per_second %v, window %v}, breaker %v, guard %v, kafka.fetch_max_wait %v",
		int(cfg.App.MaxInFlight), cfg.App.Timeout, t.Ordering, t.Retry.Tiers, *t.Retry.Jitter, t.Retry.Budget.Ratio, *t.Retry.Budget.MinPerSecond, t.Retry.Budget.Window,
		onOff(t.Breaker.On()), onOff(t.Guard.On()), cfg.Kafka.FetchMaxWait)
	return started{lag: lc, dlq: t.DLQ.Topic, metrics: "http://" + addr + "/metrics", setup: setup,
		stop: func() error {
			// The caller cancels ctx first; Run returns once kretry has
			// committed and left its group.
			select {
			case err := <-done:
				return err
			case <-time.After(30 * time.Second):
				return errors.New("kretry did not stop within 30s")
			}
		}}, nil
}

// blockingPeer runs the blocking-retry consumer (internal/blocking, the
// benchmark's peer "blocking") delivering to the same app over HTTP with
// kretry's deliverer, its backoffs the tiers' delays.
type blockingPeer struct{}

func (blockingPeer) start(ctx context.Context, e *env) (started, error) {
	bc := blocking.Config{Brokers: e.addrs, Topic: e.topic, Group: e.prefix + "-blocking",
		Backoffs: e.plan.Tiers, FetchMaxWait: 50 * time.Millisecond}
	if err := createTopics(ctx, e.adm, e.plan.Partitions, bc.DLQTopic()); err != nil {
		return started{}, err
	}
	h, err := delivery.NewHTTP(delivery.HTTPConfig{URL: e.app.url, Timeout: e.plan.AppTimeout, MaxInFlight: int(e.plan.Partitions)})
	if err != nil {
		return started{}, err
	}
	stop, err := blocking.Start(ctx, bc, func(ctx context.Context, r *kgo.Record) error {
		m := &delivery.Message{ID: r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10),
			Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp,
			Key: r.Key, Value: r.Value, Headers: r.Headers, Attempt: 1}
		return h.Deliver(ctx, m)
	})
	if err != nil {
		h.Close()
		return started{}, err
	}
	lc := lag.Config{Timeout: 2 * time.Second, Window: 2,
		Groups: []lag.Group{{Name: bc.Group, Topics: []lag.Topic{{Name: e.topic, Source: e.topic, Stage: lag.StageSource}}}},
		DLQs:   []lag.DLQ{{Topic: bc.DLQTopic(), Source: e.topic}}}
	setup := fmt.Sprintf("one record at a time per partition (%d), retried in place after %v, then %s", e.plan.Partitions, bc.Backoffs, bc.DLQTopic())
	return started{lag: lc, dlq: bc.DLQTopic(), setup: setup, stop: func() error { stop(); h.Close(); return nil }}, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
