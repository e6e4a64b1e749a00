package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
)

// Tracing of deliveries follows the OpenTelemetry semantic conventions
// v1.43.0 for messaging spans (docs/messaging/messaging-spans.md) and Kafka
// (docs/messaging/kafka.md): each delivery attempt is one "process" span of
// kind CONSUMER (a push-based consumer: kretry, not the app, initiates the
// delivery), named "process <topic>".

// Attribute keys of the delivery spans, beside the messaging ones.
const (
	// AttrAttempt is the delivery attempt: 1 on the first delivery, 2 on
	// the first retry, … (ce-attempt).
	AttrAttempt = attribute.Key("kretry.attempt")
)

// DefaultOTLPPath is the path added to an OTLP endpoint given without one:
// the traces path of OTLP/HTTP (OTLP specification, "OTLP/HTTP Request").
const DefaultOTLPPath = "/v1/traces"

// maxStatusDescription bounds the span status description, in bytes: the
// error text may hold 4 KiB of the app's answer.
const maxStatusDescription = 256

// TracingOptions configure NewTracing.
type TracingOptions struct {
	// Endpoint is where spans are exported over OTLP/HTTP (protobuf): an
	// http:// or https:// URL. Without a path (or with "/") the path is
	// DefaultOTLPPath, as for OTEL_EXPORTER_OTLP_ENDPOINT; any other path
	// is used as given, as for OTEL_EXPORTER_OTLP_TRACES_ENDPOINT. The
	// exporter's other OTEL_EXPORTER_OTLP_* variables (headers, timeout,
	// certificates, compression) apply. Required unless Exporter is set.
	Endpoint string
	// Exporter replaces the OTLP exporter; its spans are exported as each
	// one ends (synchronously), for tests: tracetest.NewInMemoryExporter.
	Exporter sdktrace.SpanExporter
	// ServiceName is the service.name resource attribute; default
	// ServiceName.
	ServiceName string
	// ServiceVersion is service.version; default engine.Version.
	ServiceVersion string
	// InstanceID is service.instance.id; "" leaves it out.
	InstanceID string
	// Sampler decides which spans are recorded and exported; default
	// ParentBased(AlwaysSample()): a record whose producer sampled its
	// trace is traced, one whose producer did not is not, and a record
	// without trace context starts a sampled trace.
	Sampler sdktrace.Sampler
	// Logger receives export failures, at most one line a minute; nil
	// uses slog.Default().
	Logger *slog.Logger
}

// Tracing is one process's tracer provider: create it with NewTracing,
// hand TracerProvider to TraceDeliveries, and Shutdown at exit (it exports
// the spans still queued). A nil *Tracing is valid and traces nothing.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// NewTracing builds a tracer provider that exports to o.Endpoint over
// OTLP/HTTP in batches (spans are queued and dropped when the queue is
// full: a slow or absent collector never holds up a delivery), or to
// o.Exporter. It returns an error for a bad endpoint.
func NewTracing(ctx context.Context, o TracingOptions) (*Tracing, error) {
	if o.ServiceName == "" {
		o.ServiceName = ServiceName
	}
	if o.ServiceVersion == "" {
		o.ServiceVersion = engine.Version
	}
	if o.Sampler == nil {
		o.Sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(o.ServiceName), semconv.ServiceVersion(o.ServiceVersion)}
	if o.InstanceID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(o.InstanceID))
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithSampler(o.Sampler),
		sdktrace.WithResource(resource.NewWithAttributes(semconv.SchemaURL, attrs...)),
	}
	switch {
	case o.Exporter != nil:
		opts = append(opts, sdktrace.WithSyncer(o.Exporter))
	case o.Endpoint != "":
		endpoint, err := OTLPTracesURL(o.Endpoint)
		if err != nil {
			return nil, err
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(endpoint))
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter for %q: %w", endpoint, err)
		}
		opts = append(opts, sdktrace.WithBatcher(&loggingExporter{SpanExporter: exp, log: o.Logger, endpoint: endpoint}))
	default:
		return nil, errors.New("tracing: no OTLP endpoint and no exporter")
	}
	return &Tracing{tp: sdktrace.NewTracerProvider(opts...)}, nil
}

// OTLPTracesURL returns the URL spans are posted to for an OTLP endpoint
// (see TracingOptions.Endpoint), or an error when endpoint is not an
// absolute http:// or https:// URL with a host.
func OTLPTracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("tracing: OTLP endpoint %q: must be an http:// or https:// URL with a host", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = DefaultOTLPPath
	}
	return u.String(), nil
}

// TracerProvider returns the provider of the delivery spans; a no-op one
// for a nil Tracing.
func (t *Tracing) TracerProvider() trace.TracerProvider {
	if t == nil {
		return noop.NewTracerProvider()
	}
	return t.tp
}

// Shutdown exports the spans still queued (within ctx) and stops the
// provider: spans started afterwards are not recorded.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// loggingExporter logs export failures itself, at most once a minute with
// the count since the last line, and reports success to the batch
// processor: the spans of a failed export are dropped either way, and the
// processor would otherwise hand every failure to OpenTelemetry's global
// error handler (a line on stderr each time).
type loggingExporter struct {
	sdktrace.SpanExporter
	log      *slog.Logger
	endpoint string

	mu      sync.Mutex
	last    time.Time
	failed  int
	dropped int
}

func (e *loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failed++
	e.dropped += len(spans)
	if now := time.Now(); now.Sub(e.last) >= time.Minute {
		e.log.Warn("spans could not be exported; they are dropped (deliveries go on)",
			"endpoint", e.endpoint, "failed_exports", e.failed, "dropped_spans", e.dropped, "err", err)
		e.last, e.failed, e.dropped = now, 0, 0
	}
	return nil
}

// TraceDeliveries wraps d so that every delivery attempt is a span of tp,
// ended when d.Deliver returns (or panics: the panic goes on):
//
//   - name "process <topic>", kind CONSUMER (messaging conventions v1.43.0:
//     a "process" span of a push-based consumer);
//   - parent: the producer's context that the record carries (its
//     traceparent/tracestate headers, read by the W3C TraceContext
//     propagator), so the delivery joins the producer's trace: every
//     attempt, the first and each retry, is a new child span of the
//     producer's span, in the same trace. The span also links to that
//     context, as the conventions ask of every "process" span. When ctx
//     already carries a span (an embedding program's own), that span
//     stays the parent and the producer's context is the link only (the
//     conventions advise against re-parenting inside another span). A
//     record without trace context starts a new trace per attempt;
//   - attributes: messaging.system kafka, messaging.operation.name and
//     .type process, messaging.destination.name, .partition.id and
//     messaging.kafka.offset of the original record (as in ce-id, so they
//     are the same on every attempt; a retry's tier topic is not among
//     them), messaging.message.id (ce-id), messaging.consumer.group.name
//     group, messaging.kafka.message.key when the key is valid UTF-8
//     without control characters (the conventions leave out a key with no
//     canonical string form), messaging.kafka.message.tombstone on a null
//     value, kretry.attempt, kretry.outcome (ok, transient, permanent, by
//     statuses), and http.response.status_code, which HTTP delivery adds;
//   - on failure: status Error with the error text (at most 256 bytes) and
//     error.type, the same value as on messaging.process.duration: the
//     HTTP status ("503"), "timeout", "connection" or "other".
//
// d receives a ctx that carries the span, so HTTP delivery sends the
// span's traceparent (the app's span is a child of kretry's) and a Go
// handler can start child spans from it. A nil tp returns d unchanged.
func TraceDeliveries(d delivery.Deliverer, tp trace.TracerProvider, group string, statuses delivery.Statuses) delivery.Deliverer {
	if tp == nil {
		return d
	}
	return &tracedDeliverer{
		next:     d,
		tracer:   tp.Tracer(ScopeName, trace.WithInstrumentationVersion(engine.Version), trace.WithSchemaURL(semconv.SchemaURL)),
		group:    group,
		statuses: statuses,
	}
}

type tracedDeliverer struct {
	next     delivery.Deliverer
	tracer   trace.Tracer
	group    string
	statuses delivery.Statuses
}

func (d *tracedDeliverer) Deliver(ctx context.Context, m *delivery.Message) (err error) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(d.attributes(m)...)}
	parent := ctx
	if producer := delivery.RecordTraceContext(m.Headers); producer.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
		if !trace.SpanContextFromContext(ctx).IsValid() {
			parent = trace.ContextWithRemoteSpanContext(ctx, producer)
		}
	}
	sctx, span := d.tracer.Start(parent, "process "+m.Topic, opts...)
	returned := false
	defer func() {
		if !returned {
			// d panicked: the panic goes on, unrecovered here so that the
			// engine's recover sees its stack; the span still ends.
			span.SetAttributes(semconv.ErrorTypeKey.String("other"))
			span.SetStatus(codes.Error, "the delivery handler panicked")
			span.End()
			return
		}
		d.end(span, err)
	}()
	err = d.next.Deliver(sctx, m)
	returned = true
	return err
}

func (d *tracedDeliverer) attributes(m *delivery.Message) []attribute.KeyValue {
	id := m.ID
	if id == "" {
		id = fmt.Sprintf("%s/%d/%d", m.Topic, m.Partition, m.Offset)
	}
	kv := []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(m.Topic),
		semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(m.Partition), 10)),
		semconv.MessagingKafkaOffset(int(m.Offset)),
		semconv.MessagingMessageID(id),
		AttrAttempt.Int(m.Attempt),
	}
	if d.group != "" {
		kv = append(kv, semconv.MessagingConsumerGroupName(d.group))
	}
	if m.Key != nil && printable(m.Key) {
		kv = append(kv, semconv.MessagingKafkaMessageKey(string(m.Key)))
	}
	if m.Value == nil {
		kv = append(kv, semconv.MessagingKafkaMessageTombstone(true))
	}
	return kv
}

func (d *tracedDeliverer) end(span trace.Span, err error) {
	if err == nil {
		span.SetAttributes(AttrOutcome.String("ok"))
		span.End()
		return
	}
	v := delivery.Classify(err, d.statuses)
	span.SetAttributes(AttrOutcome.String(string(v.Class)), semconv.ErrorTypeKey.String(errorType(err, v)))
	span.SetStatus(codes.Error, truncate(v.Message, maxStatusDescription))
	span.End()
}

// errorType is the error.type of a failed delivery: the values the engine
// gives messaging.process.duration (engine's errorType), so that a span
// and its metric agree, as the conventions ask ("Recording errors").
func errorType(err error, v delivery.Verdict) string {
	switch {
	case v.Status != 0:
		return strconv.Itoa(v.Status)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case v.Unlisted:
		return "other"
	default:
		return "connection"
	}
}

// printable reports whether key has a canonical string form: valid UTF-8
// without control characters.
func printable(key []byte) bool {
	if !utf8.Valid(key) {
		return false
	}
	for _, r := range string(key) {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
