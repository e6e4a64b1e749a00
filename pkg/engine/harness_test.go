package engine

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// env is one in-process broker with a source topic and its plan.
type env struct {
	t     testing.TB
	addrs []string
	plan  retrytopics.Plan
	adm   *kadm.Client
	app   *recorder
}

func newEnv(t testing.TB, partitions int32, tiers ...time.Duration) *env {
	t.Helper()
	addrs := brokerAddrs(t, partitions)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	src := sourceTopic()
	if _, err := adm.CreateTopic(context.Background(), partitions, 1, nil, src); err != nil {
		t.Fatal(err)
	}
	if err := kafkatest.WaitTopics(context.Background(), adm, src); err != nil {
		t.Fatal(err)
	}
	plan := retrytopics.Plan{Source: src, DLQ: retrytopics.DLQTopic(src)}
	for _, d := range tiers {
		plan.Tiers = append(plan.Tiers, retrytopics.Tier{Topic: retrytopics.TierTopic(src, d), Delay: d})
	}
	return &env{t: t, addrs: addrs, plan: plan, adm: adm, app: newRecorder()}
}

// brokerAddrs returns the addresses of the pass's broker: a fresh embedded
// broker for this test, or the shared Kafka node.
func brokerAddrs(t testing.TB, partitions int32) []string {
	t.Helper()
	t.Logf("broker: %s", brokerKind)
	if brokerKind == kafkatest.Kafka {
		return kafkaCluster.addrs(t)
	}
	// Short group timeouts let a killed member's partitions move quickly.
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: partitions,
		Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

// produce writes recs to the source topic (Topic defaults to the source).
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

// options returns engine options for this env with short timeouts.
func (e *env) options(d delivery.Deliverer) Options {
	return Options{
		Brokers:         e.addrs,
		Plan:            e.plan,
		Group:           e.group(),
		TransactionalID: "test-" + e.plan.Source + "-" + e.t.Name(),
		// Tests that start several engines of one group name each
		// instance only where they test identity (staticOptions).
		DynamicMembership: true,
		Deliverer:         d,
		// The tests of parking set OrderingKey or OrderingPartition
		// themselves (keyedOptions); the others run without parking.
		Ordering:        flow.OrderingNone,
		MaxInFlight:     8,
		DeliveryTimeout: 2 * time.Second,
		FetchMaxWait:    50 * time.Millisecond,
		ShutdownGrace:   2 * time.Second,
		Logger:          slog.New(slog.NewTextHandler(e.t.Output(), &slog.HandlerOptions{Level: testLogLevel})),
	}
}

// start runs an engine until the test ends; stop() stops it early.
func (e *env) start(o Options) (eng *Engine, stop func()) {
	e.t.Helper()
	eng, stop, _, _ = e.launch(o)
	e.t.Cleanup(stop)
	return eng, stop
}

// launch runs an engine. stop cancels it and waits (at most 20s) for Run to
// return, once; cancel and once let a caller end it another way (see
// startKillable).
func (e *env) launch(o Options) (eng *Engine, stop func(), cancel context.CancelFunc, once *sync.Once) {
	e.t.Helper()
	eng, err := New(context.Background(), o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	once = &sync.Once{}
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("engine.Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				e.t.Error("engine did not stop within 20s")
			}
		})
	}
	return eng, stop, cancel, once
}

// readAll returns every committed record of topic. The topic's writes are
// all committed before it is called; it reads until the topic is quiet.
func (e *env) readAll(topic string) []*kgo.Record {
	e.t.Helper()
	if e.endOffset(topic) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 && (len(out) > 0 || time.Since(start) > 3*time.Second) {
			return out
		}
	}
}

// endOffset is the sum of the end offsets of topic's partitions.
func (e *env) endOffset(topic string) int64 {
	e.t.Helper()
	ends, err := e.adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// committedAt is the group's committed offset of the source's partition
// p, and false before the group has committed it (or the broker cannot
// say): for waits, which poll until it is there.
func (e *env) committedAt(p int32) (int64, bool) {
	offs, err := e.adm.FetchOffsets(context.Background(), e.group())
	if err != nil {
		return 0, false
	}
	o, ok := offs.Lookup(e.plan.Source, p)
	return o.At, ok
}

// eventually polls cond every 20ms until it holds or 15s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// call is one delivery the application saw.
type call struct {
	msg delivery.Message
	at  time.Time
	ok  bool // the app acknowledged it
}

// recorder is an application: it records every delivery and answers with
// the function set for the record's value.
type recorder struct {
	mu     sync.Mutex
	calls  []call
	acked  map[string]int
	answer func(m *delivery.Message) error
}

func newRecorder() *recorder {
	return &recorder{acked: map[string]int{}, answer: func(*delivery.Message) error { return nil }}
}

func (r *recorder) Deliver(_ context.Context, m *delivery.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *m
	c.Key, c.Value = slices.Clone(m.Key), slices.Clone(m.Value)
	err := r.answer(m)
	r.calls = append(r.calls, call{c, time.Now(), err == nil})
	if err == nil {
		r.acked[m.ID]++
	}
	return err
}

func (r *recorder) setAnswer(f func(m *delivery.Message) error) {
	r.mu.Lock()
	r.answer = f
	r.mu.Unlock()
}

// callsFor returns the deliveries of the record with ID id.
func (r *recorder) callsFor(id string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.msg.ID == id {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) numCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

func (r *recorder) numAcked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acked)
}

// header returns the first value of header k in r, and whether it exists.
func header(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

func id(topic string, p int32, o int64) string { return fmt.Sprintf("%s/%d/%d", topic, p, o) }

// severableDialer dials normally until sever is called; then it closes every
// connection it made and refuses new ones: to the broker, the client is as
// good as a killed process.
type severableDialer struct {
	mu      sync.Mutex
	conns   []net.Conn
	severed bool
}

func (d *severableDialer) dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.severed {
		return nil, fmt.Errorf("severed")
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, host)
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *severableDialer) sever() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.severed = true
	for _, c := range d.conns {
		c.Close()
	}
}

// testLogLevel is info with KRETRY_TEST_LOG=info, warn otherwise.
var testLogLevel = func() slog.Level {
	if os.Getenv("KRETRY_TEST_LOG") == "info" {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}()
