// Package telemetry is kretry's metrics plumbing, shared by the sidecar,
// the engines and the lag monitor: an OpenTelemetry MeterProvider whose
// reader is the Prometheus exporter over a registry of its own (no
// globals), the /metrics handler that serves it, and Pipeline, the
// engine.Observer that records the pipeline metrics (deliveries, app
// latency, moves, transactions, in-flight deliveries). docs/METRICS.md
// lists every metric with its unit and attributes.
//
//	tel, err := telemetry.New(telemetry.Options{})
//	mux.Handle("/metrics", tel.Handler())
//	mon, err := lag.New(cl, cfg, lag.WithMeterProvider(tel.MeterProvider()))
//	eng, err := engine.New(ctx, engine.Options{…, Observer: tel.Observer()})
//
// Names follow the OpenTelemetry messaging conventions where one exists
// (messaging.process.duration; the attributes messaging.system,
// messaging.operation.name, messaging.consumer.group.name,
// messaging.destination.name, messaging.destination.partition.id,
// error.type) and are kretry.* otherwise. The exporter writes them the
// Prometheus way: dots become underscores, counters end in _total, the
// unit "s" adds _seconds (messaging.process.duration →
// messaging_process_duration_seconds); resource attributes go to
// target_info, and the instrumentation scope is left off the series.
//
// Tracing (tracing.go) is separate from the metrics: NewTracing builds the
// tracer provider (OTLP/HTTP export); delivery.TraceDeliveries wraps a
// delivery.Deliverer so that each delivery attempt is a span, child of the
// producer's context that the record carries (README, "Tracing").
package telemetry

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/pkg/flow"
)

// ServiceName is the service.name resource attribute (target_info).
const ServiceName = "kretry"

// Options configure New.
type Options struct {
	// ServiceVersion is the service.version resource attribute; default
	// flow.Version.
	ServiceVersion string
	// InstanceID is the service.instance.id resource attribute (the pod
	// or host name); "" leaves it out.
	InstanceID string
	// NoRuntimeMetrics leaves out the Go runtime and process collectors
	// (go_*, process_*), which are on by default.
	NoRuntimeMetrics bool
}

// Telemetry is one process's metrics: create it with New, serve Handler
// on /metrics, hand MeterProvider to the lag monitor and Observer to the
// engines, and Shutdown at exit. A nil *Telemetry (metrics disabled) is
// valid: Observer returns nil, MeterProvider nil, Handler 404s.
type Telemetry struct {
	mp       *sdkmetric.MeterProvider
	reg      *prometheus.Registry
	pipeline *Pipeline
}

// New builds the MeterProvider with the Prometheus exporter on a registry
// of its own and the pipeline instruments. It returns an error only when
// an instrument or the exporter cannot be created.
func New(o Options) (*Telemetry, error) {
	if o.ServiceVersion == "" {
		o.ServiceVersion = flow.Version
	}
	reg := prometheus.NewRegistry()
	if !o.NoRuntimeMetrics {
		if err := errors.Join(
			reg.Register(collectors.NewGoCollector()),
			reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		); err != nil {
			return nil, err
		}
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(ServiceName), semconv.ServiceVersion(o.ServiceVersion)}
	if o.InstanceID != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(o.InstanceID))
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(resource.NewSchemaless(attrs...)))
	p, err := NewPipeline(mp)
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, err
	}
	return &Telemetry{mp: mp, reg: reg, pipeline: p}, nil
}

// MeterProvider returns the provider every kretry instrument is created
// on; nil for a nil Telemetry.
func (t *Telemetry) MeterProvider() metric.MeterProvider {
	if t == nil {
		return nil
	}
	return t.mp
}

// Handler serves the metrics in the Prometheus text format (and
// OpenMetrics when the scraper asks for it).
func (t *Telemetry) Handler() http.Handler {
	if t == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(t.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Pipeline returns the pipeline instruments; nil for a nil Telemetry.
func (t *Telemetry) Pipeline() *Pipeline {
	if t == nil {
		return nil
	}
	return t.pipeline
}

// Observer returns the engine.Observer that records the pipeline metrics,
// for engine.Options.Observer; a nil interface (observe nothing) for a nil
// Telemetry, never a typed nil.
func (t *Telemetry) Observer() engine.Observer {
	if t == nil {
		return nil
	}
	return t.pipeline
}

// Shutdown stops the MeterProvider: the callbacks stop and /metrics
// serves only the runtime metrics afterwards.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.mp.Shutdown(ctx)
}

// ObserveEngine reports an engine's live state (see Pipeline.ObserveEngine)
// until the returned func is called; a no-op for a nil Telemetry.
func (t *Telemetry) ObserveEngine(group, source string, g EngineGauges) (stop func()) {
	if t == nil {
		return func() {}
	}
	return t.pipeline.ObserveEngine(group, source, g)
}
