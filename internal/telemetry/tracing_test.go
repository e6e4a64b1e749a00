package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kretry/kretry/internal/telemetry"
	"github.com/kretry/kretry/pkg/delivery"
)

const (
	producerTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpanID      = "00f067aa0ba902b7"
	producerTraceParent = "00-" + producerTraceID + "-" + producerSpanID + "-01"
	producerTraceState  = "congo=t61rcWkgMzE"
)

// newTraced returns d wrapped by TraceDeliveries on a provider that
// exports each span to the returned in-memory exporter as it ends.
func newTraced(t *testing.T, d delivery.Deliverer, o telemetry.TracingOptions) (delivery.Deliverer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	o.Exporter = exp
	tr, err := telemetry.NewTracing(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return delivery.TraceDeliveries(d, tr.TracerProvider(), "orders-kretry", delivery.DefaultStatuses), exp
}

func message(attempt int, hs ...kgo.RecordHeader) *delivery.Message {
	return &delivery.Message{
		ID: "orders/2/42", Topic: "orders", Partition: 2, Offset: 42,
		Key: []byte("customer-1"), Value: []byte(`{"sku":"a"}`),
		Headers: hs, Attempt: attempt,
	}
}

func traceHeaders() []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: "traceparent", Value: []byte(producerTraceParent)},
		{Key: "tracestate", Value: []byte(producerTraceState)},
	}
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestTraceDeliveriesSpan: one delivery is one CONSUMER span "process
// orders", a child of the producer's context and linked to it, with the
// messaging attributes; the handler's ctx carries the span.
func TestTraceDeliveriesSpan(t *testing.T) {
	var inHandler trace.SpanContext
	d, exp := newTraced(t, delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
		inHandler = trace.SpanContextFromContext(ctx)
		if !trace.SpanFromContext(ctx).IsRecording() {
			t.Error("the handler's ctx holds no recording span")
		}
		return nil
	}), telemetry.TracingOptions{InstanceID: "pod-0"})
	if err := d.Deliver(t.Context(), message(2, traceHeaders()...)); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name != "process orders" || s.SpanKind != trace.SpanKindConsumer {
		t.Errorf("span %q kind %v, want \"process orders\" CONSUMER", s.Name, s.SpanKind)
	}
	if !s.SpanContext.Equal(inHandler) {
		t.Errorf("the handler saw span %v, the exporter got %v", inHandler, s.SpanContext)
	}
	if got := s.SpanContext.TraceID().String(); got != producerTraceID {
		t.Errorf("trace id %s, want the producer's %s", got, producerTraceID)
	}
	if !s.Parent.IsRemote() || s.Parent.SpanID().String() != producerSpanID {
		t.Errorf("parent %v, want the producer's remote span %s", s.Parent, producerSpanID)
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID().String() != producerSpanID ||
		s.Links[0].SpanContext.TraceID().String() != producerTraceID {
		t.Errorf("links %v, want one to the producer's span", s.Links)
	}
	if got := s.SpanContext.TraceState().String(); got != producerTraceState {
		t.Errorf("tracestate %q, want the producer's %q", got, producerTraceState)
	}
	want := map[attribute.Key]attribute.Value{
		"messaging.system":                   attribute.StringValue("kafka"),
		"messaging.operation.name":           attribute.StringValue("process"),
		"messaging.operation.type":           attribute.StringValue("process"),
		"messaging.destination.name":         attribute.StringValue("orders"),
		"messaging.destination.partition.id": attribute.StringValue("2"),
		"messaging.kafka.offset":             attribute.IntValue(42),
		"messaging.message.id":               attribute.StringValue("orders/2/42"),
		"messaging.consumer.group.name":      attribute.StringValue("orders-kretry"),
		"messaging.kafka.message.key":        attribute.StringValue("customer-1"),
		"kretry.attempt":                     attribute.IntValue(2),
		"kretry.outcome":                     attribute.StringValue("ok"),
	}
	got := attrs(s)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k].Emit(), v.Emit())
		}
	}
	if len(got) != len(want) {
		t.Errorf("attributes %v, want exactly %v", got, want)
	}
	if s.Status.Code != codes.Unset {
		t.Errorf("status %v, want unset on success", s.Status)
	}
	res := map[attribute.Key]string{}
	for _, kv := range s.Resource.Attributes() {
		res[kv.Key] = kv.Value.Emit()
	}
	if res["service.name"] != "kretry" || res["service.instance.id"] != "pod-0" || res["service.version"] == "" {
		t.Errorf("resource %v, want service.name kretry, service.instance.id pod-0 and a version", res)
	}
	if s.InstrumentationScope.Name != delivery.TracerName {
		t.Errorf("scope %q, want %q", s.InstrumentationScope.Name, delivery.TracerName)
	}
}

// TestTraceDeliveriesEveryAttempt: each attempt is a span of its own in
// the producer's trace.
func TestTraceDeliveriesEveryAttempt(t *testing.T) {
	d, exp := newTraced(t, delivery.HandlerFunc(func(_ context.Context, m *delivery.Message) error {
		if m.Attempt < 3 {
			return &delivery.StatusError{Status: 503}
		}
		return nil
	}), telemetry.TracingOptions{})
	for attempt := 1; attempt <= 3; attempt++ {
		_ = d.Deliver(t.Context(), message(attempt, traceHeaders()...))
	}
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (one per attempt)", len(spans))
	}
	ids := map[trace.SpanID]bool{}
	for i, s := range spans {
		ids[s.SpanContext.SpanID()] = true
		if s.SpanContext.TraceID().String() != producerTraceID || s.Parent.SpanID().String() != producerSpanID {
			t.Errorf("attempt %d: trace %s parent %s, want the producer's", i+1, s.SpanContext.TraceID(), s.Parent.SpanID())
		}
		if got := attrs(s)["kretry.attempt"]; got != attribute.IntValue(i+1) {
			t.Errorf("span %d: kretry.attempt %v", i, got.Emit())
		}
		wantCode := codes.Error
		if i == 2 {
			wantCode = codes.Unset
		}
		if s.Status.Code != wantCode {
			t.Errorf("attempt %d: status %v, want %v", i+1, s.Status, wantCode)
		}
	}
	if len(ids) != 3 {
		t.Errorf("span ids %v, want 3 distinct", ids)
	}
}

// TestTraceDeliveriesErrors: a failed attempt ends with status Error, its
// error text and error.type as the delivery metrics have it.
func TestTraceDeliveriesErrors(t *testing.T) {
	tests := []struct {
		name             string
		err              error
		errType, outcome string
		desc             string
	}{
		{"transient status", &delivery.StatusError{Status: 503, Body: "down"}, "503", "transient", "status 503: down"},
		{"permanent status", &delivery.StatusError{Status: 422}, "422", "permanent", "status 422"},
		{"unlisted status", &delivery.StatusError{Status: 401}, "401", "transient", "status 401"},
		{"timeout", fmt.Errorf("post: %w", context.DeadlineExceeded), "timeout", "transient", "post: context deadline exceeded"},
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "connection", "transient", "dial: connection refused"},
		{"unknown", errors.New("boom"), "other", "transient", "boom"},
		{"long text", errors.New(strings.Repeat("é", 300)), "other", "transient", strings.Repeat("é", 128)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, exp := newTraced(t, delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return tt.err }), telemetry.TracingOptions{})
			if err := d.Deliver(t.Context(), message(1)); err != tt.err {
				t.Fatalf("Deliver returned %v, want the handler's error unchanged", err)
			}
			s := exp.GetSpans()[0]
			if s.Status.Code != codes.Error || s.Status.Description != tt.desc {
				t.Errorf("status %v %q, want Error %q", s.Status.Code, s.Status.Description, tt.desc)
			}
			a := attrs(s)
			if a["error.type"] != attribute.StringValue(tt.errType) || a["kretry.outcome"] != attribute.StringValue(tt.outcome) {
				t.Errorf("error.type %q kretry.outcome %q, want %q %q", a["error.type"].Emit(), a["kretry.outcome"].Emit(), tt.errType, tt.outcome)
			}
		})
	}
}

// TestTraceDeliveriesPanic: a panicking handler's span ends with an
// error, and the panic reaches the caller (the engine turns it into a
// transient failure).
func TestTraceDeliveriesPanic(t *testing.T) {
	d, exp := newTraced(t, delivery.HandlerFunc(func(context.Context, *delivery.Message) error { panic("oops") }), telemetry.TracingOptions{})
	func() {
		defer func() {
			if v := recover(); v != "oops" {
				t.Errorf("recovered %v, want the handler's panic", v)
			}
		}()
		_ = d.Deliver(t.Context(), message(1))
	}()
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Status.Code != codes.Error || attrs(spans[0])["error.type"] != attribute.StringValue("other") {
		t.Fatalf("spans %v, want one ended with Error and error.type other", spans)
	}
}

// TestTraceDeliveriesContext: without trace context on the record the
// span is a root; with a span already in ctx (an embedding program's)
// that span is the parent and the producer's context a link; a key
// without a canonical string form and a tombstone are attributes as the
// conventions say.
func TestTraceDeliveriesContext(t *testing.T) {
	ok := delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil })

	t.Run("no trace context", func(t *testing.T) {
		d, exp := newTraced(t, ok, telemetry.TracingOptions{})
		_ = d.Deliver(t.Context(), message(1))
		_ = d.Deliver(t.Context(), message(2))
		spans := exp.GetSpans()
		for _, s := range spans {
			if s.Parent.IsValid() || len(s.Links) != 0 {
				t.Errorf("parent %v links %v, want a root span without links", s.Parent, s.Links)
			}
		}
		if spans[0].SpanContext.TraceID() == spans[1].SpanContext.TraceID() {
			t.Error("two attempts without trace context share a trace id; each starts its own")
		}
	})

	t.Run("ambient span", func(t *testing.T) {
		d, exp := newTraced(t, ok, telemetry.TracingOptions{})
		tp := sdktrace.NewTracerProvider()
		defer tp.Shutdown(context.Background())
		ctx, ambient := tp.Tracer("app").Start(t.Context(), "batch")
		_ = d.Deliver(ctx, message(1, traceHeaders()...))
		ambient.End()
		s := exp.GetSpans()[0]
		if s.Parent.SpanID() != ambient.SpanContext().SpanID() {
			t.Errorf("parent %v, want the ambient span %v", s.Parent.SpanID(), ambient.SpanContext().SpanID())
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID().String() != producerSpanID {
			t.Errorf("links %v, want one to the producer", s.Links)
		}
	})

	t.Run("key and tombstone", func(t *testing.T) {
		d, exp := newTraced(t, ok, telemetry.TracingOptions{})
		for _, key := range [][]byte{nil, {0xff, 0x00}, []byte("a\nb"), []byte("ключ")} {
			m := message(1)
			m.Key, m.Value = key, nil
			_ = d.Deliver(t.Context(), m)
		}
		spans := exp.GetSpans()
		for i, want := range []string{"", "", "", "ключ"} {
			a := attrs(spans[i])
			if got, ok := a["messaging.kafka.message.key"]; ok != (want != "") || got.AsString() != want {
				t.Errorf("key %d: messaging.kafka.message.key %q (set %v), want %q", i, got.Emit(), ok, want)
			}
			if a["messaging.kafka.message.tombstone"] != attribute.BoolValue(true) {
				t.Errorf("key %d: no messaging.kafka.message.tombstone on a null value", i)
			}
		}
	})
}

// TestTraceDeliveriesSampling: by default a trace the producer did not
// sample is not recorded, but the handler's ctx still carries a valid,
// unsampled span context (the app joins the same trace, unsampled); a
// ratio of 0 records no new trace.
func TestTraceDeliveriesSampling(t *testing.T) {
	var inHandler trace.SpanContext
	h := delivery.HandlerFunc(func(ctx context.Context, _ *delivery.Message) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	})
	d, exp := newTraced(t, h, telemetry.TracingOptions{})
	_ = d.Deliver(t.Context(), message(1, kgo.RecordHeader{Key: "traceparent", Value: []byte("00-" + producerTraceID + "-" + producerSpanID + "-00")}))
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans recorded for an unsampled producer trace, want 0", n)
	}
	if !inHandler.IsValid() || inHandler.IsSampled() || inHandler.TraceID().String() != producerTraceID {
		t.Errorf("handler's span context %v, want valid, unsampled, in the producer's trace", inHandler)
	}

	d, exp = newTraced(t, h, telemetry.TracingOptions{Sampler: sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))})
	_ = d.Deliver(t.Context(), message(1))
	_ = d.Deliver(t.Context(), message(1, traceHeaders()...))
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].SpanContext.TraceID().String() != producerTraceID {
		t.Errorf("ratio 0: spans %v, want only the one in the producer's sampled trace", spans)
	}
}

func TestTraceDeliveriesNilProvider(t *testing.T) {
	d := delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil })
	if _, ok := delivery.TraceDeliveries(d, nil, "g", delivery.DefaultStatuses).(delivery.HandlerFunc); !ok {
		t.Errorf("TraceDeliveries(nil provider) wrapped the deliverer")
	}
	var tr *telemetry.Tracing
	if tr.TracerProvider() == nil || tr.Shutdown(t.Context()) != nil {
		t.Error("a nil *Tracing should give a no-op provider and shut down cleanly")
	}
}
