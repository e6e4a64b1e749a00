package sidecar

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
)

// ScopeName is the instrumentation scope of the sidecar's own metrics.
const ScopeName = "github.com/kretry/kretry/internal/sidecar"

// AttrURL is the app.url a dependency metric is about (OpenTelemetry's
// url.full).
const AttrURL = attribute.Key("url.full")

// withHealth wraps d in a delivery.Health tracker that logs each change of
// the application's state (reachable, refusing, mostly failing, recovered)
// once, at warn level, naming app.url.
func withHealth(d delivery.Deliverer, cfg *config.Config, log *slog.Logger) (*delivery.Health, string) {
	target := cfg.App.URL
	if target == "" {
		target = "in-process handler"
	}
	return delivery.NewHealth(d, delivery.HealthConfig{Target: target, Logger: log.With("component", "delivery")}), target
}

// watchDependency exports h's state as the gauge kretry.dependency.state
// (0 reachable, 1 mostly failing, 2 refusing; docs/METRICS.md).
func (o *observability) watchDependency(target string, h *delivery.Health) error {
	if o.tel == nil {
		return nil
	}
	meter := o.tel.MeterProvider().Meter(ScopeName)
	g, err := meter.Int64ObservableGauge("kretry.dependency.state", metric.WithUnit("{state}"),
		metric.WithDescription("What the recent deliveries say of the application: 0 reachable, 1 mostly failing (at least half of the last 20 failed), 2 refusing (the last 3 got no answer)."))
	if err != nil {
		return err
	}
	set := metric.WithAttributeSet(attribute.NewSet(AttrURL.String(target)))
	reg, err := meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		ob.ObserveInt64(g, int64(h.State()), set)
		return nil
	}, g)
	if err != nil {
		return err
	}
	o.stops = append(o.stops, func() { _ = reg.Unregister() })
	return nil
}
