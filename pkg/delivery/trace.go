package delivery

import (
	"context"
	"net/http"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C Trace Context (https://www.w3.org/TR/trace-context/, §3.2 and
// §3.3): the names of the trace context on a record (record headers, as
// OpenTelemetry's Kafka instrumentations write them) and on the delivery
// request (HTTP headers).
const (
	// HeaderTraceParent carries the trace id, the parent span id and the
	// trace flags: "00-<32 hex>-<16 hex>-<2 hex>".
	HeaderTraceParent = "traceparent"
	// HeaderTraceState carries vendor-specific trace data along with
	// HeaderTraceParent.
	HeaderTraceState = "tracestate"
)

// traceContext is the W3C Trace Context propagator: every read of a
// traceparent goes through it, none is parsed by hand.
var traceContext propagation.TraceContext

// RecordHeaderCarrier adapts a record's headers to OpenTelemetry's
// propagation.TextMapCarrier (and ValuesGetter), so that a propagator
// reads and writes trace context on a Kafka record:
//
//	ctx = propagation.TraceContext{}.Extract(ctx, delivery.RecordHeaderCarrier{Headers: &m.Headers})
//
// Keys match exactly (Kafka header keys are case-sensitive; OpenTelemetry
// producers write "traceparent" in lower case). Get returns the value of
// the first header with the key; Set replaces the first such header's
// value and removes the others, or appends one.
type RecordHeaderCarrier struct {
	Headers *[]kgo.RecordHeader
}

var (
	_ propagation.TextMapCarrier = RecordHeaderCarrier{}
	_ propagation.ValuesGetter   = RecordHeaderCarrier{}
)

// Get returns the value of the first header named key, "" if none.
func (c RecordHeaderCarrier) Get(key string) string {
	for _, h := range *c.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Values returns the values of every header named key, in order.
func (c RecordHeaderCarrier) Values(key string) []string {
	var vs []string
	for _, h := range *c.Headers {
		if h.Key == key {
			vs = append(vs, string(h.Value))
		}
	}
	return vs
}

// Set gives the header named key the value value: the first such header
// keeps its place, later ones are removed; without one, it is appended.
func (c RecordHeaderCarrier) Set(key, value string) {
	hs := *c.Headers
	out := hs[:0:0]
	set := false
	for _, h := range hs {
		if h.Key != key {
			out = append(out, h)
		} else if !set {
			out = append(out, kgo.RecordHeader{Key: key, Value: []byte(value)})
			set = true
		}
	}
	if !set {
		out = append(out, kgo.RecordHeader{Key: key, Value: []byte(value)})
	}
	*c.Headers = out
}

// Keys returns the header keys, in order, each once.
func (c RecordHeaderCarrier) Keys() []string {
	var keys []string
	seen := map[string]bool{}
	for _, h := range *c.Headers {
		if !seen[h.Key] {
			seen[h.Key] = true
			keys = append(keys, h.Key)
		}
	}
	return keys
}

// RecordTraceContext returns the producer's trace context that the record
// headers hs carry (its traceparent and tracestate, read by the W3C
// TraceContext propagator): a remote span context, invalid (IsValid
// false) when hs hold no valid traceparent.
func RecordTraceContext(hs []kgo.RecordHeader) trace.SpanContext {
	ctx := traceContext.Extract(context.Background(), RecordHeaderCarrier{Headers: &hs})
	return trace.SpanContextFromContext(ctx)
}

// writeTraceContext sets the traceparent and tracestate of a delivery
// request. With a valid span context in ctx (tracing on: the delivery
// attempt's span) they are that span's, so the application's span is a
// child of kretry's. Otherwise the record's own traceparent and tracestate
// are copied byte for byte when its traceparent is valid (the
// TraceContext propagator reads it), so that the application's span is a
// child of the producer's: kretry only passes the context on. A value net/http
// would refuse to send (control characters) is left out.
func writeTraceContext(ctx context.Context, hdr http.Header, m *Message) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		traceContext.Inject(ctx, propagation.HeaderCarrier(hdr))
		return
	}
	if !RecordTraceContext(m.Headers).IsValid() {
		return
	}
	rc := RecordHeaderCarrier{Headers: &m.Headers}
	tp := rc.Get(HeaderTraceParent)
	if !validFieldValue(tp) {
		return // a later version's extra fields may hold anything
	}
	hdr.Set(HeaderTraceParent, tp)
	if ts := rc.Get(HeaderTraceState); ts != "" && validFieldValue(ts) {
		hdr.Set(HeaderTraceState, ts)
	}
}
