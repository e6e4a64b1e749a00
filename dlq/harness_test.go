package dlq_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// TestMain runs every test once per broker ($KRETRY_TEST_BROKER), except in
// the helper process of the kill -9 test, which runs one redrive.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperRedrive())
	}
	code := kafkatest.RunMain(m, func(k kafkatest.Kind) { brokerKind = k })
	if shared.c != nil {
		shared.c.Stop()
	}
	os.Exit(code)
}

var (
	brokerKind = kafkatest.Embedded
	shared     struct {
		once sync.Once
		c    *kafkatest.Cluster
		err  error
	}
	topicSeq atomic.Int64
)

// env is a broker, a source topic with its plan, and an app.
type env struct {
	t     testing.TB
	addrs []string
	plan  retrytopics.Plan
	adm   *kadm.Client
	app   *app
}

func newEnv(t testing.TB, partitions int32, tiers ...time.Duration) *env {
	t.Helper()
	t.Logf("broker: %s", brokerKind)
	var addrs []string
	if brokerKind == kafkatest.Kafka {
		shared.once.Do(func() { shared.c, shared.err = kafkatest.Start(context.Background(), kafkatest.Config{}) })
		if shared.err != nil {
			t.Fatal(shared.err)
		}
		addrs = shared.c.Addrs()
	} else {
		b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: partitions,
			Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		addrs = b.Addrs()
	}
	return envOn(t, addrs, partitions, tiers...)
}

// envOn is newEnv on the brokers at addrs.
func envOn(t testing.TB, addrs []string, partitions int32, tiers ...time.Duration) *env {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	src := "orders-" + strconv.FormatInt(topicSeq.Add(1), 10)
	if _, err := adm.CreateTopic(context.Background(), partitions, -1, nil, src); err != nil { // -1: the brokers' default (3 on a three-node cluster)
		t.Fatal(err)
	}
	if err := kafkatest.WaitTopics(context.Background(), adm, src); err != nil {
		t.Fatal(err)
	}
	plan := retrytopics.Plan{Source: src, DLQ: retrytopics.DLQTopic(src)}
	for _, d := range tiers {
		plan.Tiers = append(plan.Tiers, retrytopics.Tier{Topic: retrytopics.TierTopic(src, d), Delay: d})
	}
	return &env{t: t, addrs: addrs, plan: plan, adm: adm, app: &app{acked: map[string]int{}}}
}

// topic is the dlq.Topic of the env.
func (e *env) topic() dlq.Topic {
	t := dlq.Topic{Source: e.plan.Source, DLQ: e.plan.DLQ}
	if len(e.plan.Tiers) > 0 {
		t.Tier = e.plan.Tiers[0].Topic
	}
	return t
}

// client is a dlq.Client for the env, closed at the end of the test.
func (e *env) client(o ...dlq.Option) *dlq.Client {
	e.t.Helper()
	o = append([]dlq.Option{dlq.WithLogger(testLogger(e.t)), dlq.WithLeaseTTL(2 * time.Second)}, o...)
	c, err := dlq.New(e.topic(), []kgo.Opt{kgo.SeedBrokers(e.addrs...)}, o...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// run starts an engine with ordering key until the test ends.
func (e *env) run() { e.runWith(nil) }

// runWith starts an engine with ordering key, and gate as its overload
// gate (nil: none), until the test ends.
func (e *env) runWith(gate *overload.Gate) { e.runOpts(gate, nil) }

// runOpts is runWith with the engine's options changed by set (nil: none).
func (e *env) runOpts(gate *overload.Gate, set func(*engine.Options)) {
	e.t.Helper()
	o := engine.Options{
		Brokers: e.addrs, Plan: e.plan, Group: e.plan.Source + "-kretry",
		TransactionalID: "test-" + e.plan.Source, Deliverer: e.app,
		Ordering: flow.OrderingKey, ParkingTopic: retrytopics.ParkingTopic(e.plan.Source),
		MaxInFlight: 8, DeliveryTimeout: 2 * time.Second, FetchMaxWait: 50 * time.Millisecond, ShutdownGrace: 2 * time.Second,
		Logger: testLogger(e.t), Overload: gate,
	}
	if set != nil {
		set(&o)
	}
	eng, err := engine.New(context.Background(), o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("engine.Run: %v", err)
		}
	})
}

// produce writes recs to the source.
func (e *env) produce(recs ...*kgo.Record) {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range recs {
		if r.Topic == "" {
			r.Topic = e.plan.Source
		}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

// waitDLQ reads the DLQ until it holds n records (waiting or not).
func (e *env) waitDLQ(c *dlq.Client, n int) *dlq.Snapshot {
	e.t.Helper()
	var snap *dlq.Snapshot
	eventually(e.t, fmt.Sprintf("%d records in %s", n, e.plan.DLQ), func() bool {
		s, err := c.Read(context.Background())
		if err != nil {
			return false // not created yet
		}
		snap = s
		return len(s.Entries) >= n
	})
	if len(snap.Entries) != n {
		e.t.Fatalf("%s holds %d records, want %d", e.plan.DLQ, len(snap.Entries), n)
	}
	return snap
}

// eventually polls cond every 50ms until it holds or 30s pass.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// app records deliveries and answers with answer (nil: 2xx), after delay
// (nil: at once; a slow app that ignores its context).
type app struct {
	mu     sync.Mutex
	calls  []delivery.Message
	acked  map[string]int
	answer func(m *delivery.Message) error
	delay  func(m *delivery.Message) time.Duration
}

func (a *app) Deliver(_ context.Context, m *delivery.Message) error {
	a.mu.Lock()
	delay := a.delay
	a.mu.Unlock()
	if delay != nil {
		time.Sleep(delay(m))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := *m
	c.Key, c.Value, c.Headers = slices.Clone(m.Key), slices.Clone(m.Value), slices.Clone(m.Headers)
	a.calls = append(a.calls, c)
	var err error
	if a.answer != nil {
		err = a.answer(m)
	}
	if err == nil {
		a.acked[m.ID]++
	}
	return err
}

func (a *app) set(f func(m *delivery.Message) error) {
	a.mu.Lock()
	a.answer = f
	a.mu.Unlock()
}

// redriven returns the deliveries with a redrive count.
func (a *app) redriven() []delivery.Message {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []delivery.Message
	for _, c := range a.calls {
		if c.Redrives > 0 {
			out = append(out, c)
		}
	}
	return out
}

func (a *app) ackedCount(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked[id]
}

// rejectAll answers 422 (permanent) to every record.
func rejectAll(*delivery.Message) error { return &delivery.StatusError{Status: 422} }
