package delivery

import (
	"context"
	"net/http"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

const (
	producerTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	producerTraceState  = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
)

func TestRecordHeaderCarrier(t *testing.T) {
	orig := []kgo.RecordHeader{
		{Key: "a", Value: []byte("1")},
		{Key: "traceparent", Value: []byte("first")},
		{Key: "b", Value: nil},
		{Key: "traceparent", Value: []byte("second")},
		{Key: "Traceparent", Value: []byte("other case")},
	}
	hs := append([]kgo.RecordHeader{}, orig...)
	c := RecordHeaderCarrier{Headers: &hs}
	if got := c.Get("traceparent"); got != "first" {
		t.Errorf(`Get("traceparent") = %q, want the first one`, got)
	}
	if got := c.Get("TRACEPARENT"); got != "" {
		t.Errorf(`Get("TRACEPARENT") = %q, want "" (keys match exactly)`, got)
	}
	if got, want := c.Values("traceparent"), []string{"first", "second"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Values = %q, want %q", got, want)
	}
	if got, want := c.Keys(), []string{"a", "traceparent", "b", "Traceparent"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Keys = %q, want %q", got, want)
	}

	shared := hs
	c.Set("traceparent", "new")
	want := []kgo.RecordHeader{
		{Key: "a", Value: []byte("1")},
		{Key: "traceparent", Value: []byte("new")},
		{Key: "b", Value: nil},
		{Key: "Traceparent", Value: []byte("other case")},
	}
	if !reflect.DeepEqual(hs, want) {
		t.Errorf("after Set: %v, want %v", hs, want)
	}
	if !reflect.DeepEqual(shared, orig) {
		t.Errorf("Set changed the slice it was given: %v, want %v", shared, orig)
	}
	c.Set("tracestate", "x=1")
	if got := hs[len(hs)-1]; got.Key != "tracestate" || string(got.Value) != "x=1" {
		t.Errorf("Set of a new key: last header %v, want tracestate: x=1", got)
	}
}

func TestRecordTraceContext(t *testing.T) {
	tests := []struct {
		name  string
		hs    []kgo.RecordHeader
		valid bool
	}{
		{"none", nil, false},
		{"valid", []kgo.RecordHeader{{Key: "traceparent", Value: []byte(producerTraceParent)}}, true},
		{"upper-case hex", []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01")}}, false},
		{"zero trace id", []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-00000000000000000000000000000000-00f067aa0ba902b7-01")}}, false},
		{"version 00 with more fields", []kgo.RecordHeader{{Key: "traceparent", Value: []byte(producerTraceParent + "-x")}}, false},
		{"key in another case", []kgo.RecordHeader{{Key: "Traceparent", Value: []byte(producerTraceParent)}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := RecordTraceContext(tt.hs)
			if sc.IsValid() != tt.valid {
				t.Fatalf("valid = %v, want %v", sc.IsValid(), tt.valid)
			}
			if tt.valid && (sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
				sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsSampled() || !sc.IsRemote()) {
				t.Errorf("span context %+v does not match %s", sc, producerTraceParent)
			}
		})
	}
}

// deliverTo delivers m with ctx to a server that records the request's
// headers and answers status.
func deliverTo(t *testing.T, ctx context.Context, m *Message, status int) (http.Header, error) {
	t.Helper()
	got := make(chan http.Header, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.WriteHeader(status)
	})
	err := newHTTP(t, HTTPConfig{URL: srv.URL}).Deliver(ctx, m)
	select {
	case h := <-got:
		return h, err
	default:
		t.Fatalf("the request did not reach the app: %v", err)
		return nil, err
	}
}

// TestHTTPTraceContextPassThrough: without a span in the context (tracing
// off), the record's traceparent and tracestate go to the app unchanged,
// so the app's span is a child of the producer's.
func TestHTTPTraceContextPassThrough(t *testing.T) {
	hdr := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	const v1 = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future"
	tests := []struct {
		name         string
		hs           []kgo.RecordHeader
		parent, stat []string
	}{
		{"both", hdr("traceparent", producerTraceParent, "tracestate", producerTraceState),
			[]string{producerTraceParent}, []string{producerTraceState}},
		{"traceparent only", hdr("other", "x", "traceparent", producerTraceParent),
			[]string{producerTraceParent}, nil},
		{"tracestate kept as written", hdr("traceparent", producerTraceParent, "tracestate", "rojo=1 , congo=2"),
			[]string{producerTraceParent}, []string{"rojo=1 , congo=2"}},
		{"later version kept as written", hdr("traceparent", v1), []string{v1}, nil},
		{"invalid traceparent: neither", hdr("traceparent", "00-xyz", "tracestate", producerTraceState), nil, nil},
		{"later version with a control character: neither", hdr("traceparent", v1+"\x00"), nil, nil},
		{"tracestate with a control character: left out", hdr("traceparent", producerTraceParent, "tracestate", "a=1\n"),
			[]string{producerTraceParent}, nil},
		{"none", nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &Message{ID: "orders/0/1", Topic: "orders", Attempt: 1, Value: []byte("v"), Headers: tt.hs}
			h, err := deliverTo(t, t.Context(), m, http.StatusNoContent)
			if err != nil {
				t.Fatalf("Deliver: %v", err)
			}
			if got := h.Values(HeaderTraceParent); !reflect.DeepEqual(got, tt.parent) {
				t.Errorf("traceparent %q, want %q", got, tt.parent)
			}
			if got := h.Values(HeaderTraceState); !reflect.DeepEqual(got, tt.stat) {
				t.Errorf("tracestate %q, want %q", got, tt.stat)
			}
			if got := len(h.Values(HeaderKafkaHeader)); got != len(tt.hs) {
				t.Errorf("%d kretry-kafka-header lines, want %d: the record headers are passed on as always", got, len(tt.hs))
			}
		})
	}
}

// TestHTTPTraceContextFromSpan: with a span in the context (tracing on)
// the request carries that span's context, so the app's span is a child
// of kretry's; the span gets the answer's status code.
func TestHTTPTraceContextFromSpan(t *testing.T) {
	for _, status := range []int{http.StatusOK, http.StatusServiceUnavailable} {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		m := &Message{ID: "orders/0/1", Topic: "orders", Attempt: 1, Headers: []kgo.RecordHeader{
			{Key: "traceparent", Value: []byte(producerTraceParent)},
			{Key: "tracestate", Value: []byte(producerTraceState)},
		}}
		producer := RecordTraceContext(m.Headers)
		ctx, span := tp.Tracer("test").Start(trace.ContextWithRemoteSpanContext(t.Context(), producer), "process orders")
		h, err := deliverTo(t, ctx, m, status)
		span.End()
		if (err != nil) != (status >= 300) {
			t.Fatalf("status %d: Deliver: %v", status, err)
		}
		sc := span.SpanContext()
		want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
		if got := h.Get(HeaderTraceParent); got != want {
			t.Errorf("status %d: traceparent %q, want %q (kretry's span)", status, got, want)
		}
		if sc.TraceID() != producer.TraceID() {
			t.Errorf("status %d: trace id %s, want the producer's %s", status, sc.TraceID(), producer.TraceID())
		}
		if got := h.Get(HeaderTraceState); got != producerTraceState {
			t.Errorf("status %d: tracestate %q, want %q (inherited from the producer)", status, got, producerTraceState)
		}
		ended := rec.Ended()
		if len(ended) != 1 {
			t.Fatalf("status %d: %d spans ended, want 1", status, len(ended))
		}
		want2 := attribute.Int("http.response.status_code", status)
		found := false
		for _, kv := range ended[0].Attributes() {
			found = found || kv == want2
		}
		if !found {
			t.Errorf("status %d: span attributes %v lack %v", status, ended[0].Attributes(), want2)
		}
	}
}
