package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/kretry/kretry/pkg/flow"
)

// The delivery spans themselves are delivery.TraceDeliveries' (public, for
// Go programs that embed the engine); this file builds the tracer provider
// that `kretry run` hands it.

// DefaultOTLPPath is the path added to an OTLP endpoint given without one:
// the traces path of OTLP/HTTP (OTLP specification, "OTLP/HTTP Request").
const DefaultOTLPPath = "/v1/traces"

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
	// ServiceVersion is service.version; default flow.Version.
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
// hand TracerProvider to delivery.TraceDeliveries, and Shutdown at exit (it exports
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
		o.ServiceVersion = flow.Version
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
