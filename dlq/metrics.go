package dlq

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric attributes.
const (
	attrSource     = attribute.Key("kretry.source")
	attrTopic      = attribute.Key("messaging.destination.name")
	attrErrorClass = attribute.Key("kretry.error_class")
)

// RegisterMetrics registers the DLQ gauges of trackers on mp (docs/METRICS.md):
//
//	kretry.dlq.waiting_records        records waiting: not redriven, not discarded
//	kretry.dlq.oldest_waiting_age     age of the oldest waiting record (s)
//	kretry.dlq.redriven_records       records redriven, by kretry.error_class
//	kretry.dlq.redrive_returned_records  of those, records back in the DLQ, by kretry.error_class
//
// A tracker that has not yet read its DLQ to the end reports nothing. The
// returned func unregisters them.
func RegisterMetrics(mp metric.MeterProvider, trackers ...*Tracker) (func(), error) {
	meter := mp.Meter("github.com/kretry/kretry/dlq")
	waiting, err1 := meter.Int64ObservableGauge("kretry.dlq.waiting_records", metric.WithUnit("{record}"),
		metric.WithDescription("Records waiting in a DLQ: neither redriven nor discarded (kretry dlq)."))
	age, err2 := meter.Float64ObservableGauge("kretry.dlq.oldest_waiting_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest record waiting in a DLQ (since it was dead-lettered); absent when none waits."))
	redriven, err3 := meter.Int64ObservableGauge("kretry.dlq.redriven_records", metric.WithUnit("{record}"),
		metric.WithDescription("Records of a DLQ redriven so far, by their error class."))
	returned, err4 := meter.Int64ObservableGauge("kretry.dlq.redrive_returned_records", metric.WithUnit("{record}"),
		metric.WithDescription("Redriven records that failed again and came back to the DLQ, by the error class they were redriven with."))
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			return nil, err
		}
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, t := range trackers {
			s := t.Summary()
			if !s.Ready {
				continue
			}
			base := []attribute.KeyValue{attrSource.String(t.c.t.Source), attrTopic.String(t.c.t.DLQ)}
			set := metric.WithAttributes(base...)
			o.ObserveInt64(waiting, int64(s.Waiting), set)
			if !s.Oldest.IsZero() {
				o.ObserveFloat64(age, max(time.Since(s.Oldest).Seconds(), 0), set)
			}
			for cl, n := range s.Redriven {
				o.ObserveInt64(redriven, int64(n), metric.WithAttributes(append(base, attrErrorClass.String(cl))...))
				o.ObserveInt64(returned, int64(s.Returned[cl]), metric.WithAttributes(append(base, attrErrorClass.String(cl))...))
			}
		}
		return nil
	}, waiting, age, redriven, returned)
	if err != nil {
		return nil, err
	}
	return func() { _ = reg.Unregister() }, nil
}
