package sidecar

import (
	"context"
	"log/slog"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/kretry/kretry/internal/telemetry"
	"github.com/kretry/kretry/pkg/config"
)

// startTracing returns the tracer provider of the delivery spans and the
// func that flushes and stops it: tp itself when set (Options), none when
// tracing.enabled is false, else an OTLP/HTTP pipeline to
// tracing.otlp_endpoint whose root sampler keeps tracing.sample_ratio of
// the traces kretry starts (a record with trace context follows its
// producer's decision: ParentBased).
func startTracing(ctx context.Context, cfg *config.Config, tp trace.TracerProvider, log *slog.Logger) (trace.TracerProvider, func(), error) {
	if tp != nil {
		return tp, func() {}, nil
	}
	tc := &cfg.Tracing
	if !tc.Enabled {
		return nil, func() {}, nil
	}
	tlog := log.With("component", "tracing")
	tr, err := telemetry.NewTracing(ctx, telemetry.TracingOptions{
		Endpoint:    tc.OTLPEndpoint,
		ServiceName: tc.ServiceName,
		InstanceID:  cfg.Kafka.InstanceIDOrHost(),
		Sampler:     sdktrace.ParentBased(sdktrace.TraceIDRatioBased(tc.SampleRatio)),
		Logger:      tlog,
	})
	if err != nil {
		return nil, nil, err
	}
	endpoint, _ := telemetry.OTLPTracesURL(tc.OTLPEndpoint)
	log.Info("tracing on: a span per delivery attempt, exported over OTLP/HTTP", "endpoint", endpoint, "sample_ratio", tc.SampleRatio)
	return tr.TracerProvider(), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			tlog.Warn("flushing the last spans", "err", err)
		}
	}, nil
}
