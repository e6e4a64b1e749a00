package sidecar

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/config"
)

// Attributes of the overload metrics (docs/OVERLOAD.md).
const (
	// AttrReason is why the breaker opened: dependency or systemic.
	AttrReason = attribute.Key("kretry.reason")
	// AttrExpiredAction is what happened to an expired record: dead_letter
	// or drop.
	AttrExpiredAction = attribute.Key("kretry.expired.action")
	// AttrFingerprint is the start of a failure's message, numbers masked
	// (overload.Fingerprint).
	AttrFingerprint = attribute.Key("kretry.error.fingerprint")
)

// topFingerprints is how many failure fingerprints are exported.
const topFingerprints = 10

// gated is one topic's gate, for /readyz.
type gated struct {
	topic string
	gate  *overload.Gate
}

// notReady says which topics' breakers are open, "" when none.
func notReady(gs []gated) string {
	var open []string
	now := time.Now()
	for _, g := range gs {
		s := g.gate.Snapshot(now)
		if s.State != overload.Closed {
			open = append(open, fmt.Sprintf("topic %q: breaker %s (%s) for %s", g.topic, s.State, s.Reason, now.Sub(s.Since).Round(time.Second)))
		}
	}
	return strings.Join(open, "; ")
}

// watchGate exports a gate's state and counters (docs/OVERLOAD.md).
func (o *observability) watchGate(group, source string, g *overload.Gate) error {
	if o.tel == nil {
		return nil
	}
	m := o.tel.MeterProvider().Meter(ScopeName)
	state, err1 := m.Int64ObservableGauge("kretry.breaker.state", metric.WithUnit("{state}"),
		metric.WithDescription("The dependency breaker: 0 closed, 1 open (delivery paused), 2 probing."))
	opened, err2 := m.Int64ObservableCounter("kretry.breaker.opened", metric.WithUnit("{opening}"),
		metric.WithDescription("Times the breaker opened, by reason: dependency (transient failures) or systemic (the guard)."))
	held, err3 := m.Int64ObservableCounter("kretry.deliveries.held", metric.WithUnit("{delivery}"),
		metric.WithDescription("Failed deliveries that consumed no attempt because the breaker was open or probing."))
	limit, err4 := m.Int64ObservableGauge("kretry.delivery.limit", metric.WithUnit("{delivery}"),
		metric.WithDescription("The in-flight limit in force: adaptive, the slow start after the breaker closed, or app.max_in_flight."))
	denied, err5 := m.Int64ObservableCounter("kretry.retry.budget.denied", metric.WithUnit("{delivery}"),
		metric.WithDescription("Due retries that had to wait for the retry budget."))
	ratio, err6 := m.Float64ObservableGauge("kretry.retry.budget.ratio", metric.WithUnit("1"),
		metric.WithDescription("Retries ÷ deliveries over retry.budget.window (0 without a budget)."))
	expired, err7 := m.Int64ObservableCounter("kretry.records.expired", metric.WithUnit("{record}"),
		metric.WithDescription("Records not delivered because older than max_age, by action: dead_letter or drop."))
	prints, err8 := m.Int64ObservableCounter("kretry.delivery.failures", metric.WithUnit("{delivery}"),
		metric.WithDescription("Failed deliveries of the 10 most frequent failure fingerprints (class, error type, message start with numbers masked) since the start."))
	for _, err := range []error{err1, err2, err3, err4, err5, err6, err7, err8} {
		if err != nil {
			return err
		}
	}
	base := []attribute.KeyValue{semconv.MessagingConsumerGroupName(group), lag.AttrSource.String(source)}
	set := metric.WithAttributeSet(attribute.NewSet(base...))
	with := func(kv attribute.KeyValue) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(append([]attribute.KeyValue(nil), base...), kv)...))
	}
	reg, err := m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		s := g.Snapshot(time.Now())
		ob.ObserveInt64(state, int64(s.State), set)
		for _, r := range []overload.Reason{overload.ReasonDependency, overload.ReasonSystemic} {
			ob.ObserveInt64(opened, s.Opened[r], with(AttrReason.String(string(r))))
		}
		ob.ObserveInt64(held, s.Held, set)
		ob.ObserveInt64(limit, int64(s.Limit), set)
		ob.ObserveInt64(denied, s.BudgetDenied, set)
		ob.ObserveFloat64(ratio, s.RetryRatio, set)
		for _, a := range []string{config.OnExpiredDeadLetter, config.OnExpiredDrop} {
			ob.ObserveInt64(expired, s.Expired[a], with(AttrExpiredAction.String(a)))
		}
		for _, f := range g.TopFailures(topFingerprints) {
			kv := append(append([]attribute.KeyValue(nil), base...), semconv.ErrorTypeKey.String(f.Answer),
				attribute.String("kretry.error.class", f.Class), AttrFingerprint.String(f.Message))
			ob.ObserveInt64(prints, f.Count, metric.WithAttributeSet(attribute.NewSet(kv...)))
		}
		return nil
	}, state, opened, held, limit, denied, ratio, expired, prints)
	if err != nil {
		return err
	}
	o.stops = append(o.stops, func() { _ = reg.Unregister() })
	return nil
}
