package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// kretryOptions are the engine options both kretry peers share: the
// defaults of `kretry run` (MaxInFlight 64, RetryShare 0.75, CommitInterval
// 100ms, FetchMaxWait 50ms, ordering key) with the bench's tiers and no
// jitter, so that a retry's due time is exactly failure + tier.
func kretryOptions(e *env, d delivery.Deliverer) engine.Options {
	plan := retrytopics.Plan{Source: e.topic, DLQ: retrytopics.DLQTopic(e.topic)}
	for _, t := range e.tiers {
		plan.Tiers = append(plan.Tiers, retrytopics.Tier{Topic: retrytopics.TierTopic(e.topic, t), Delay: t})
	}
	var copts []kgo.Opt
	if l := os.Getenv("BENCH_KGO_LOG"); l == "info" || l == "debug" {
		// franz-go's own log (debugging the engine's client: why a
		// transaction ended uncommitted, rebalances).
		copts = append(copts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgoLogLevel(), func() string { return time.Now().Format("15:04:05.000000 ") })))
	}
	if e.obs != nil {
		copts = append(copts, kgo.WithHooks(e.obs))
	}
	return engine.Options{
		ClientOpts:      copts,
		Brokers:         e.addrs,
		Plan:            plan,
		Group:           e.group,
		TransactionalID: "bench-" + e.group,
		Deliverer:       d,
		MaxInFlight:     e.maxInFlight,
		FetchMaxWait:    e.fetchWait,
		Ordering:        flow.OrderingKey,
		ParkingTopic:    retrytopics.ParkingTopic(e.topic),
		Logger:          slog.New(assignWatch{e.log.Handler(), &e.assigned}),
		MaxPending:      e.maxPending,
		CommitInterval:  e.commitIvl,
		Observer:        e.obs,
	}
}

// kretryStageTopics are the tier, parking and DLQ topics kretryOptions
// names for source topic.
func kretryStageTopics(topic string, tiers []time.Duration) []string {
	out := []string{retrytopics.DLQTopic(topic), retrytopics.ParkingTopic(topic)}
	for _, t := range tiers {
		out = append(out, retrytopics.TierTopic(topic, t))
	}
	return out
}

// txnObserver collects the engine's transaction durations and moves, and
// (a franz-go fetch hook) the records its client fetched, for the notes.
type txnObserver struct {
	mu      sync.Mutex
	took    []time.Duration
	records int
	aborted int
	moves   map[string]int
	// fetched counts the records of every topic the client fetched, again
	// after a pause or a rewind included (franz-go drops what it buffered
	// for a partition that pauses, and fetches it again on resume).
	fetched atomic.Int64
}

// OnFetchBatchRead is kgo.HookFetchBatchRead.
func (o *txnObserver) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	o.fetched.Add(int64(m.NumRecords))
}

func (o *txnObserver) Delivered(engine.DeliveryEvent) {}
func (o *txnObserver) Moved(m engine.MoveEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.moves == nil {
		o.moves = map[string]int{}
	}
	o.moves[string(m.Kind)]++
}
func (o *txnObserver) Committed(c engine.CommitEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.took = append(o.took, c.Duration)
	if os.Getenv("BENCH_TXN_LOG") != "" {
		fmt.Fprintf(os.Stderr, "txn %s took %s records %d committed %v\n", time.Now().Format("15:04:05.000"), c.Duration, c.Records, c.Committed)
	}
	o.records += c.Records
	if !c.Committed {
		o.aborted++
	}
}

func (o *txnObserver) summary() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.took) == 0 {
		return ""
	}
	s := fmt.Sprintf("%d txns, p50 %s p99 %s, %.0f records/txn", len(o.took), ms(percentile(o.took, 0.5)), ms(percentile(o.took, 0.99)), float64(o.records)/float64(len(o.took)))
	for _, kind := range []string{"retry", "park", "dead-letter"} {
		if n := o.moves[kind]; n > 0 {
			s += fmt.Sprintf(", %d %s moves", n, kind)
		}
	}
	if o.aborted > 0 {
		s += fmt.Sprintf(", %d not committed", o.aborted)
	}
	return s + fmt.Sprintf("; fetched %d records", o.fetched.Load())
}

// runEngine starts an engine and returns its stop func.
func runEngine(ctx context.Context, o engine.Options) (*engine.Engine, func(), error) {
	eng, err := engine.New(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	return eng, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e := fmt.Errorf("kretry engine: %w", err)
				o.Logger.Error(e.Error())
			}
		case <-time.After(30 * time.Second):
			o.Logger.Error("kretry engine did not stop within 30s")
		}
	}, nil
}

// (d) kretry in-process: the engine with a delivery.HandlerFunc.
func startKretry(ctx context.Context, e *env) (func(), error) {
	h := delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
		switch e.a.handle(ctx, m.Value) {
		case failPermanent:
			return delivery.Permanent(errPermanent)
		case failTransient:
			return delivery.Transient(errTransient)
		}
		return nil
	})
	_, stop, err := runEngine(ctx, kretryOptions(e, h))
	return stop, err
}

// (e) kretry over HTTP: the engine with delivery.HTTP to the local app,
// as `kretry run` builds it.
func startKretryHTTP(ctx context.Context, e *env) (func(), error) {
	h, err := delivery.NewHTTP(delivery.HTTPConfig{URL: e.appURL, MaxInFlight: e.maxInFlight})
	if err != nil {
		return nil, err
	}
	_, stop, err := runEngine(ctx, kretryOptions(e, h))
	if err != nil {
		return nil, err
	}
	return func() { stop(); h.Close() }, nil
}

// kgoLogLevel is BENCH_KGO_LOG's franz-go log level: info, or debug.
func kgoLogLevel() kgo.LogLevel {
	if os.Getenv("BENCH_KGO_LOG") == "debug" {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelInfo
}

// assignWatch passes an engine's log on to h and stores in at the time
// (Unix ns) of its first "partitions assigned" line, whatever h's level:
// the start of issue 10's "first delivery ≤ 100ms after partitions are
// assigned".
type assignWatch struct {
	h  slog.Handler
	at *atomic.Int64
}

func (w assignWatch) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || w.h.Enabled(ctx, l)
}

func (w assignWatch) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "partitions assigned" {
		w.at.CompareAndSwap(0, r.Time.UnixNano())
	}
	if !w.h.Enabled(ctx, r.Level) {
		return nil
	}
	return w.h.Handle(ctx, r)
}

func (w assignWatch) WithAttrs(as []slog.Attr) slog.Handler {
	return assignWatch{w.h.WithAttrs(as), w.at}
}

func (w assignWatch) WithGroup(name string) slog.Handler {
	return assignWatch{w.h.WithGroup(name), w.at}
}
