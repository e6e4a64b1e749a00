package lag

import (
	"context"
	"errors"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Attribute keys of kretry's own, beside the OpenTelemetry messaging ones
// (messaging.consumer.group.name, messaging.destination.name,
// messaging.destination.partition.id, error.type).
const (
	// AttrSource is the source topic of a kretry pipeline.
	AttrSource = attribute.Key("kretry.source")
	// AttrStage is a stage of a kretry pipeline: source, tier-N, parking
	// or dlq.
	AttrStage = attribute.Key("kretry.stage")
)

// ScopeName is the instrumentation scope of the lag metrics.
const ScopeName = "github.com/kretry/kretry/lag"

type instruments struct {
	reg      metric.Registration
	scans    metric.Int64Counter
	duration metric.Float64Histogram
}

// newInstruments creates the lag instruments (see docs/METRICS.md) and
// registers one callback that observes m.Latest().
func newInstruments(m *Monitor, mp metric.MeterProvider) (*instruments, error) {
	meter := mp.Meter(ScopeName)
	g := &gaugeMaker{meter: meter}
	lag := g.i64("kretry.consumer.lag", "{record}",
		"Records a consumer group has yet to consume: end offset (last stable offset for read_committed groups) minus committed offset.")
	age := g.f64("kretry.consumer.lag.age", "s",
		"How long the next record a consumer group will consume has been in the log, from its timestamp; 0 when caught up.")
	status := g.i64("kretry.consumer.status", "{status}",
		"Consumer status over the status window: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 ERR.")
	committed := g.i64("kretry.consumer.offset", "{offset}",
		"The consumer group's committed offset (per-partition mode only).")
	end := g.i64("kretry.partition.end_offset", "{offset}",
		"High watermark of a monitored partition (per-partition mode only).")
	start := g.i64("kretry.partition.start_offset", "{offset}",
		"Log start offset of a monitored partition (per-partition mode only).")
	ttd := g.f64("kretry.lag.time_to_drain", "s",
		"Estimated time to consume the lag at the recent drain rate: lag divided by the consume rate over the status window; 0 when caught up, +Inf when lagging and nothing was consumed over the window.")
	rate := g.f64("kretry.consumer.drain.rate", "{record}/s",
		"Consume rate over the status window: records (offsets) committed per second.")
	stages := stageGauges{
		records: g.i64("kretry.stage.records", "{record}",
			"Records waiting in a stage of a kretry pipeline: source, tier, parking or DLQ."),
		age: g.f64("kretry.stage.age", "s",
			"Age of the oldest record waiting in a stage of a kretry pipeline."),
	}
	errs := g.errs
	scans, err := meter.Int64Counter("kretry.lag.scans", metric.WithUnit("{scan}"),
		metric.WithDescription("Lag scans; error.type is \"incomplete\" when some offsets could not be read."))
	errs = append(errs, err)
	duration, err := meter.Float64Histogram("kretry.lag.scan.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one lag scan."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	perPartition := m.cfg.PerPartition
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		snap := m.Latest()
		if snap == nil {
			return nil
		}
		d := drainGauges{ttd: ttd, rate: rate}
		if perPartition {
			observePartitions(o, snap, lag, age, status, committed, end, start, d)
		} else {
			observeTopics(o, snap, lag, age, status, d)
		}
		stages.observe(o, snap)
		return nil
	}, lag, age, status, committed, end, start, ttd, rate, stages.records, stages.age)
	if err != nil {
		return nil, err
	}
	return &instruments{reg: reg, scans: scans, duration: duration}, nil
}

func (in *instruments) close() error { return in.reg.Unregister() }

func (in *instruments) scanned(snap *Snapshot, err error) {
	ctx := context.Background()
	var opts []metric.AddOption
	var ropts []metric.RecordOption
	if err != nil {
		a := metric.WithAttributes(semconv.ErrorTypeKey.String("incomplete"))
		opts, ropts = append(opts, a), append(ropts, a)
	}
	in.scans.Add(ctx, 1, opts...)
	in.duration.Record(ctx, snap.Duration.Seconds(), ropts...)
}

func rowAttrs(r *Row, partition bool) attribute.Set {
	kv := make([]attribute.KeyValue, 0, 5)
	kv = append(kv, semconv.MessagingConsumerGroupName(r.Group), semconv.MessagingDestinationName(r.Topic))
	if partition {
		kv = append(kv, semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))))
	}
	if r.Stage != "" {
		kv = append(kv, AttrSource.String(r.Source), AttrStage.String(r.Stage))
	}
	return attribute.NewSet(kv...)
}

// gaugeMaker creates the observable gauges of newInstruments on meter,
// keeping their creation errors, in order, in errs.
type gaugeMaker struct {
	meter metric.Meter
	errs  []error
}

// i64 is the int64 gauge name (unit, description desc).
func (g *gaugeMaker) i64(name, unit, desc string) metric.Int64ObservableGauge {
	x, err := g.meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	g.errs = append(g.errs, err)
	return x
}

// f64 is the float64 gauge name (unit, description desc).
func (g *gaugeMaker) f64(name, unit, desc string) metric.Float64ObservableGauge {
	x, err := g.meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
	g.errs = append(g.errs, err)
	return x
}

// stageGauges are the gauges of the records waiting in each stage of a
// kretry pipeline and of the oldest one's age.
type stageGauges struct {
	records metric.Int64ObservableGauge
	age     metric.Float64ObservableGauge
}

// observe observes into o each stage of snap whose count is complete:
// its records, and its oldest record's age (s) when known.
func (sg stageGauges) observe(o metric.Observer, snap *Snapshot) {
	for _, st := range snap.Stages() {
		set := metric.WithAttributeSet(attribute.NewSet(
			AttrSource.String(st.Source), AttrStage.String(st.Stage), semconv.MessagingDestinationName(st.Topic)))
		if st.Partial {
			continue
		}
		o.ObserveInt64(sg.records, st.Records, set)
		if st.AgeKnown {
			o.ObserveFloat64(sg.age, st.Age.Seconds(), set)
		}
	}
}

// drainGauges are the drain-rate and time-to-drain gauges.
type drainGauges struct{ ttd, rate metric.Float64ObservableGauge }

func (d drainGauges) observe(o metric.Observer, set metric.ObserveOption, lag int64, rate float64, rateKnown bool) {
	if rateKnown {
		o.ObserveFloat64(d.rate, rate, set)
	}
	if lag == 0 || rateKnown {
		o.ObserveFloat64(d.ttd, TimeToDrain(lag, rate), set)
	}
}

func observePartitions(o metric.Observer, snap *Snapshot, lag metric.Int64ObservableGauge, age metric.Float64ObservableGauge,
	status, committed, end, start metric.Int64ObservableGauge, d drainGauges,
) {
	type tp struct {
		topic     string
		partition int32
	}
	seen := map[tp]bool{}
	offsets := func(r *Row) {
		k := tp{r.Topic, r.Partition}
		if r.Error != "" || seen[k] {
			return
		}
		seen[k] = true
		set := metric.WithAttributeSet(attribute.NewSet(semconv.MessagingDestinationName(r.Topic),
			semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition)))))
		o.ObserveInt64(end, r.HighWatermark, set)
		o.ObserveInt64(start, r.LogStart, set)
	}
	for i := range snap.Rows {
		r := &snap.Rows[i]
		set := metric.WithAttributeSet(rowAttrs(r, true))
		o.ObserveInt64(status, int64(r.Status), set)
		offsets(r)
		if r.Error != "" {
			continue
		}
		o.ObserveInt64(lag, r.Lag, set)
		if r.AgeKnown {
			o.ObserveFloat64(age, r.Age.Seconds(), set)
		}
		if r.Committed >= 0 {
			o.ObserveInt64(committed, r.Committed, set)
		}
		d.observe(o, set, r.Lag, r.DrainRate, r.DrainRateKnown)
	}
	for i := range snap.DLQ {
		offsets(&snap.DLQ[i])
	}
}

// observeTopics aggregates per group and topic: the lag summed (left out
// while a partition cannot be measured, rather than understated), the age
// and status of the worst partition, the drain rates summed and the time
// to drain of the sums (the topic's lag at the topic's rate).
func observeTopics(o metric.Observer, snap *Snapshot, lag metric.Int64ObservableGauge, age metric.Float64ObservableGauge, status metric.Int64ObservableGauge, d drainGauges) {
	type agg struct {
		row       *Row
		lag       int64
		age       float64
		ageKnown  bool
		rate      float64
		rateKnown bool
		status    Status
		failed    bool
	}
	type key struct{ group, topic string }
	var order []key
	aggs := map[key]*agg{}
	for i := range snap.Rows {
		r := &snap.Rows[i]
		k := key{r.Group, r.Topic}
		a := aggs[k]
		if a == nil {
			a = &agg{row: r, ageKnown: true, rateKnown: true}
			aggs[k] = a
			order = append(order, k)
		}
		a.status = max(a.status, r.Status)
		if r.Error != "" {
			a.failed = true
			continue
		}
		a.lag += r.Lag
		a.ageKnown = a.ageKnown && r.AgeKnown
		a.age = max(a.age, r.Age.Seconds())
		a.rate += r.DrainRate
		a.rateKnown = a.rateKnown && r.DrainRateKnown
	}
	for _, k := range order {
		a := aggs[k]
		set := metric.WithAttributeSet(rowAttrs(a.row, false))
		o.ObserveInt64(status, int64(a.status), set)
		if a.failed {
			continue
		}
		o.ObserveInt64(lag, a.lag, set)
		if a.ageKnown {
			o.ObserveFloat64(age, a.age, set)
		}
		d.observe(o, set, a.lag, a.rate, a.rateKnown)
	}
}
