package sidecar_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

const (
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerID  = "00f067aa0ba902b7"
	traceParent = "00-" + traceID + "-" + producerID + "-01"
	traceState  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

// appRequest is what the app saw of one delivery.
type appRequest struct {
	id, attempt             string
	traceparent, tracestate []string
}

// traceApp is an httptest app that records the trace context of every
// delivery and answers 503 to records whose key is "fail", 204 to others.
type traceApp struct {
	mu   sync.Mutex
	reqs []appRequest
}

func (a *traceApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.reqs = append(a.reqs, appRequest{
		id: r.Header.Get(delivery.HeaderCEID), attempt: r.Header.Get(delivery.HeaderCEAttempt),
		traceparent: r.Header.Values("traceparent"), tracestate: r.Header.Values("tracestate"),
	})
	a.mu.Unlock()
	if r.Header.Get(delivery.HeaderCEKafkaKey) == "ZmFpbA==" { // base64("fail")
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *traceApp) requests(id string) []appRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []appRequest
	for _, r := range a.reqs {
		if r.id == id {
			out = append(out, r)
		}
	}
	return out
}

// readAll returns the committed records of topic, waiting until there
// are n of them.
func readAll(t *testing.T, brokers []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: %d records within 30s, want %d", topic, len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

// TestTraceContextEndToEnd runs the sidecar on the embedded broker with an
// HTTP app, tracing on and off. A record with traceparent/tracestate that
// fails twice goes source → tier → DLQ; its tier and DLQ copies keep every
// original header byte for byte, trace context included. The app sees the
// record's trace id on every attempt; its parent span is kretry's attempt
// span (a new span per attempt, child of the producer's) with tracing on,
// and the producer's span itself with tracing off.
func TestTraceContextEndToEnd(t *testing.T) {
	for _, tracing := range []bool{true, false} {
		t.Run(fmt.Sprintf("tracing=%v", tracing), func(t *testing.T) {
			testTraceContext(t, tracing)
		})
	}
}

func testTraceContext(t *testing.T, tracing bool) {
	app := &traceApp{}
	srv := httptest.NewServer(app)
	defer srv.Close()
	cfg, err := config.Parse(fmt.Appendf(nil, `
embedded: {listen: %q, data_dir: "", partitions: 1}
app: {url: %q, timeout: 5s}
metrics: {listen: ""}
lag: {interval: 0s}
topics:
  - name: orders
    ordering: none
    retry: {tiers: [100ms], jitter: 0}
`, freePort(t), srv.URL+"/kafka"), nil)
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	o := sidecar.Options{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if tracing {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer tp.Shutdown(context.Background())
		o.TracerProvider = tp
	}
	started := make(chan *sidecar.Sidecar, 1)
	o.Started = func(s *sidecar.Sidecar) { started <- s }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- sidecar.Run(ctx, cfg, o) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var s *sidecar.Sidecar
	select {
	case s = <-started:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("sidecar did not start")
	}

	original := []kgo.RecordHeader{
		{Key: "traceparent", Value: []byte(traceParent)},
		{Key: "bin", Value: []byte{0x00, 0xff}},
		{Key: "tracestate", Value: []byte(traceState)},
		{Key: "bin", Value: nil},
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range []*kgo.Record{
		{Topic: "orders", Key: []byte("fail"), Value: []byte("a"), Headers: original}, // offset 0
		{Topic: "orders", Key: []byte("ok"), Value: []byte("b"), Headers: original},   // offset 1
		{Topic: "orders", Key: []byte("ok"), Value: []byte("c")},                      // offset 2
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// The failing record: source (attempt 1) → orders.retry.100ms
	// (attempt 2) → orders.dlq, exhausted. Its copies keep the original
	// headers, after kretry's own, byte for byte.
	for _, topic := range []string{"orders.retry.100ms", "orders.dlq"} {
		rec := readAll(t, s.Brokers, topic, 1)[0]
		n := len(retrytopics.Headers)
		if len(rec.Headers) < n {
			t.Fatalf("%s: %d headers, want kretry's %d and the original ones", topic, len(rec.Headers), n)
		}
		for i, name := range retrytopics.Headers {
			if rec.Headers[i].Key != name {
				t.Errorf("%s: header %d is %q, want %q", topic, i, rec.Headers[i].Key, name)
			}
		}
		if rest := rec.Headers[n:]; !reflect.DeepEqual(rest, original) {
			t.Errorf("%s: headers after kretry's: %q, want the original %q", topic, rest, original)
		}
	}

	failed, okTraced, okBare := app.requests("orders/0/0"), app.requests("orders/0/1"), app.requests("orders/0/2")
	if len(failed) != 2 || failed[0].attempt != "1" || failed[1].attempt != "2" {
		t.Fatalf("the failing record was delivered %+v, want attempts 1 and 2", failed)
	}
	if len(okTraced) != 1 || len(okBare) != 1 {
		t.Fatalf("deliveries %+v and %+v, want one each", okTraced, okBare)
	}

	if !tracing {
		for _, r := range append(failed, okTraced...) {
			if !reflect.DeepEqual(r.traceparent, []string{traceParent}) || !reflect.DeepEqual(r.tracestate, []string{traceState}) {
				t.Errorf("%s attempt %s: traceparent %q tracestate %q, want the record's, unchanged", r.id, r.attempt, r.traceparent, r.tracestate)
			}
		}
		if okBare[0].traceparent != nil || okBare[0].tracestate != nil {
			t.Errorf("a record without trace context was delivered with %q %q", okBare[0].traceparent, okBare[0].tracestate)
		}
		return
	}

	// Tracing on: every request's parent is an exported "process orders"
	// span; those of the records with trace context are children of the
	// producer's span, in its trace, one new span per attempt.
	spans := map[string]tracetest.SpanStub{}
	for _, sp := range exp.GetSpans() {
		spans[sp.SpanContext.SpanID().String()] = sp
	}
	seen := map[string]bool{}
	for _, r := range append(append(failed, okTraced...), okBare...) {
		if len(r.traceparent) != 1 {
			t.Fatalf("%s attempt %s: traceparent %q, want one", r.id, r.attempt, r.traceparent)
		}
		sc := parseTraceParent(t, r.traceparent[0])
		sp, ok := spans[sc.SpanID().String()]
		if !ok {
			t.Fatalf("%s attempt %s: parent span %s is not one of kretry's exported spans", r.id, r.attempt, sc.SpanID())
		}
		if seen[sc.SpanID().String()] {
			t.Errorf("%s attempt %s: span %s already used by another attempt", r.id, r.attempt, sc.SpanID())
		}
		seen[sc.SpanID().String()] = true
		if sp.Name != "process orders" || sp.SpanKind != trace.SpanKindConsumer || sp.SpanContext.TraceID() != sc.TraceID() {
			t.Errorf("%s attempt %s: span %q %v in trace %s, want a CONSUMER span \"process orders\" in trace %s",
				r.id, r.attempt, sp.Name, sp.SpanKind, sp.SpanContext.TraceID(), sc.TraceID())
		}
		if r.id == "orders/0/2" {
			if sp.Parent.IsValid() {
				t.Errorf("the record without trace context: span parent %v, want a root", sp.Parent)
			}
			continue
		}
		if sc.TraceID().String() != traceID || sp.Parent.SpanID().String() != producerID {
			t.Errorf("%s attempt %s: trace %s, span parent %s; want the producer's trace %s and span %s",
				r.id, r.attempt, sc.TraceID(), sp.Parent.SpanID(), traceID, producerID)
		}
		if !reflect.DeepEqual(r.tracestate, []string{traceState}) {
			t.Errorf("%s attempt %s: tracestate %q, want the producer's %q", r.id, r.attempt, r.tracestate, traceState)
		}
	}
}

func parseTraceParent(t *testing.T, tp string) trace.SpanContext {
	t.Helper()
	sc := delivery.RecordTraceContext([]kgo.RecordHeader{{Key: "traceparent", Value: []byte(tp)}})
	if !sc.IsValid() {
		t.Fatalf("traceparent %q is not valid", tp)
	}
	return sc
}

// TestTracingConfigExportsOTLP: with tracing.enabled, the spans of the
// deliveries reach tracing.otlp_endpoint over OTLP/HTTP (here an httptest
// collector), the last ones when Run flushes them at shutdown; the Go
// handler's ctx carries the attempt's span.
func TestTracingConfigExportsOTLP(t *testing.T) {
	var (
		mu     sync.Mutex
		posted [][]byte
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.URL.Path == "/v1/traces" {
			posted = append(posted, b)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	cfg, err := config.Parse(fmt.Appendf(nil, `
embedded: {listen: %q, data_dir: "", partitions: 1}
app: {url: http://127.0.0.1:1/unused}
metrics: {listen: ""}
lag: {interval: 0s}
tracing: {enabled: true, otlp_endpoint: %q, service_name: orders-sidecar}
topics:
  - name: orders
    ordering: none
`, freePort(t), collector.URL), nil)
	if err != nil {
		t.Fatal(err)
	}
	delivered := make(chan trace.SpanContext, 1)
	started := make(chan *sidecar.Sidecar, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(ctx, cfg, sidecar.Options{
			Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			Deliverer: delivery.HandlerFunc(func(ctx context.Context, _ *delivery.Message) error {
				delivered <- trace.SpanContextFromContext(ctx)
				return nil
			}),
			Started: func(s *sidecar.Sidecar) { started <- s },
		})
	}()
	var s *sidecar.Sidecar
	select {
	case s = <-started:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("sidecar did not start")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: "orders", Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte(traceParent)}}}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var sc trace.SpanContext
	select {
	case sc = <-delivered:
	case <-time.After(30 * time.Second):
		t.Fatal("the record was not delivered")
	}
	if sc.TraceID().String() != traceID || sc.SpanID().String() == producerID || !sc.IsSampled() {
		t.Errorf("the handler's span context %v: want a sampled span of kretry's own in trace %s", sc, traceID)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	all := bytes.Join(posted, nil)
	tid, sid := sc.TraceID(), sc.SpanID()
	for _, want := range [][]byte{[]byte("process orders"), []byte("orders-sidecar"), tid[:], sid[:]} {
		if !bytes.Contains(all, want) {
			t.Errorf("the OTLP export (%d requests) lacks %q", len(posted), want)
		}
	}
}
