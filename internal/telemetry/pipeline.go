package telemetry

import (
	"context"
	"errors"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
)

// ScopeName is the instrumentation scope of the pipeline metrics.
const ScopeName = "github.com/kretry/kretry/internal/telemetry"

// Attribute keys of kretry's own, beside the messaging ones. The source
// topic and the stage are lag.AttrSource and lag.AttrStage.
const (
	// AttrOutcome is a delivery's outcome (ok, transient, permanent; the
	// key of the delivery spans, delivery.AttrOutcome) or a transaction's
	// (committed, aborted).
	AttrOutcome = delivery.AttrOutcome
	// AttrMoveKind is a move's kind: retry, park or dead-letter.
	AttrMoveKind = attribute.Key("kretry.move.kind")
	// AttrErrorClass is the kretry-error-class of a move: transient,
	// permanent or exhausted.
	AttrErrorClass = attribute.Key("kretry.error.class")
)

// processBuckets are the semantic conventions' advised boundaries for
// messaging.process.duration, in seconds.
var processBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}

// attemptBuckets bound kretry.delivery.attempt: the first tries one by one,
// then coarser.
var attemptBuckets = []float64{1, 2, 3, 4, 5, 6, 8, 10, 16}

type attemptKey struct{ group, source, outcome string }

// Pipeline records the engine's events as metrics. It implements
// engine.Observer: its methods are safe for concurrent use and do not
// block (one map lookup for the attribute set, then lock-free adds).
type Pipeline struct {
	process     metric.Float64Histogram
	deliveries  metric.Int64Counter
	moves       metric.Int64Counter
	txns        metric.Int64Counter
	txnDuration metric.Float64Histogram
	txnRecords  metric.Int64Counter
	attempts    metric.Int64Histogram

	processSets  setCache[processKey]
	deliverySets setCache[deliveryKey]
	moveSets     setCache[moveKey]
	commitSets   setCache[commitKey]
	attemptSets  setCache[attemptKey]

	mu      sync.Mutex
	engines []*engineGauges
	reg     metric.Registration
}

var _ engine.Observer = (*Pipeline)(nil)

// EngineGauges read an engine's live state for the gauges of
// ObserveEngine. A nil func leaves its gauge out.
type EngineGauges struct {
	// InFlight is the number of deliveries under way.
	InFlight func() int64
	// BlockedKeys is the number of keys whose later records are parked.
	BlockedKeys func() int64
	// ParkedRecords is the number of records the engine holds parked.
	ParkedRecords func() int64
	// HeldKeys is the number of blocked keys held under on_dead_letter
	// hold, waiting for `kretry parking release`.
	HeldKeys func() int64
}

type engineGauges struct {
	set metric.MeasurementOption
	g   EngineGauges
}

// NewPipeline creates the pipeline instruments on mp.
func NewPipeline(mp metric.MeterProvider) (*Pipeline, error) {
	meter := mp.Meter(ScopeName)
	p := &Pipeline{}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(processBuckets...))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	p.process = histogram("messaging.process.duration",
		"Duration of one delivery to the app (HTTP request or handler call), by outcome's error.type.")
	p.deliveries = counter("kretry.deliveries", "{delivery}",
		"Delivery attempts by stage and outcome (ok, transient, permanent).")
	p.moves = counter("kretry.moves", "{record}",
		"Records moved, in a committed transaction, to a retry tier, the parking topic or the DLQ.")
	p.txns = counter("kretry.transactions", "{transaction}",
		"Kafka transactions ended, by outcome (committed, aborted).")
	p.txnDuration = histogram("kretry.transaction.duration",
		"Duration of one Kafka transaction, begin to end.")
	p.txnRecords = counter("kretry.transaction.records", "{record}",
		"Records whose offsets a transaction covered.")
	var err error
	p.attempts, err = meter.Int64Histogram("kretry.delivery.attempt", metric.WithUnit("{attempt}"),
		metric.WithDescription("The ce-attempt of each delivery, by outcome: how many tries records take (a retry storm shifts it right)."),
		metric.WithExplicitBucketBoundaries(attemptBuckets...))
	errs = append(errs, err)
	inFlight := gauge("kretry.deliveries.in_flight", "{delivery}", "Deliveries under way.")
	blocked := gauge("kretry.parking.blocked_keys", "{key}", "Keys whose later records are parked behind a failing record.")
	parked := gauge("kretry.parking.records", "{record}", "Records the engine holds parked.")
	held := gauge("kretry.parking.held_keys", "{key}", "Blocked keys held under on_dead_letter hold: their parked records wait for `kretry parking release`.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		p.observeEngines(o, engineInstruments{inFlight, blocked, parked, held})
		return nil
	}, inFlight, blocked, parked, held)
	if err != nil {
		return nil, err
	}
	p.reg = reg
	return p, nil
}

// engineInstruments are the gauges of EngineGauges, in its order.
type engineInstruments struct {
	inFlight, blocked, parked, held metric.Int64ObservableGauge
}

// observeEngines observes into o, for each engine ObserveEngine watches,
// its deliveries in flight, blocked keys, parked records and held keys
// (the gauges it has a func for).
func (p *Pipeline) observeEngines(o metric.Observer, in engineInstruments) {
	p.mu.Lock()
	engines := slices.Clone(p.engines)
	p.mu.Unlock()
	for _, e := range engines {
		for _, x := range []struct {
			g  metric.Int64ObservableGauge
			fn func() int64
		}{{in.inFlight, e.g.InFlight}, {in.blocked, e.g.BlockedKeys}, {in.parked, e.g.ParkedRecords}, {in.held, e.g.HeldKeys}} {
			if x.fn != nil {
				o.ObserveInt64(x.g, x.fn(), e.set)
			}
		}
	}
}

// ObserveEngine reports an engine's live state under its group and source
// topic until the returned func is called.
func (p *Pipeline) ObserveEngine(group, source string, g EngineGauges) (stop func()) {
	e := &engineGauges{
		set: metric.WithAttributeSet(attribute.NewSet(semconv.MessagingConsumerGroupName(group), lag.AttrSource.String(source))),
		g:   g,
	}
	p.mu.Lock()
	p.engines = append(p.engines, e)
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.engines = slices.DeleteFunc(p.engines, func(x *engineGauges) bool { return x == e })
	}
}

// setCache holds the attribute set of each key, built once: the keys are
// few (groups × topics × stages × outcomes × error types).
type setCache[K comparable] struct {
	mu sync.RWMutex
	m  map[K]metric.MeasurementOption
}

func (c *setCache[K]) get(key K, build func(K) []attribute.KeyValue) metric.MeasurementOption {
	c.mu.RLock()
	o, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return o
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.m[key]; ok {
		return o
	}
	if c.m == nil {
		c.m = map[K]metric.MeasurementOption{}
	}
	o = metric.WithAttributeSet(attribute.NewSet(build(key)...))
	c.m[key] = o
	return o
}

type processKey struct{ group, topic, errType string }

type deliveryKey struct {
	group, topic, source, stage, outcome, errType string
}

// Delivered counts a delivery attempt and records the app's latency.
func (p *Pipeline) Delivered(e engine.DeliveryEvent) {
	ctx := context.Background()
	pk := processKey{e.Group, e.Topic, e.ErrorType}
	p.process.Record(ctx, e.Duration.Seconds(), p.processSets.get(pk, func(pk processKey) []attribute.KeyValue {
		kv := []attribute.KeyValue{
			semconv.MessagingSystemKafka, semconv.MessagingOperationName("process"),
			semconv.MessagingConsumerGroupName(pk.group), semconv.MessagingDestinationName(pk.topic),
		}
		if pk.errType != "" {
			kv = append(kv, semconv.ErrorTypeKey.String(pk.errType))
		}
		return kv
	}))
	ak := attemptKey{e.Group, e.Source, string(e.Outcome)}
	p.attempts.Record(ctx, int64(e.Attempt), p.attemptSets.get(ak, func(ak attemptKey) []attribute.KeyValue {
		return []attribute.KeyValue{semconv.MessagingConsumerGroupName(ak.group), lag.AttrSource.String(ak.source), AttrOutcome.String(ak.outcome)}
	}))
	dk := deliveryKey{e.Group, e.Topic, e.Source, string(e.Stage), string(e.Outcome), e.ErrorType}
	p.deliveries.Add(ctx, 1, p.deliverySets.get(dk, func(dk deliveryKey) []attribute.KeyValue {
		kv := []attribute.KeyValue{
			semconv.MessagingConsumerGroupName(dk.group), semconv.MessagingDestinationName(dk.topic),
			lag.AttrSource.String(dk.source), lag.AttrStage.String(dk.stage), AttrOutcome.String(dk.outcome),
		}
		if dk.errType != "" {
			kv = append(kv, semconv.ErrorTypeKey.String(dk.errType))
		}
		return kv
	}))
}

type moveKey struct{ group, source, to, kind, class, stage string }

// Moved counts a committed move; messaging.destination.name is the topic
// the record was written to.
func (p *Pipeline) Moved(e engine.MoveEvent) {
	mk := moveKey{e.Group, e.Source, e.To, string(e.Kind), e.Class, string(e.Stage)}
	p.moves.Add(context.Background(), 1, p.moveSets.get(mk, func(mk moveKey) []attribute.KeyValue {
		kv := []attribute.KeyValue{
			semconv.MessagingConsumerGroupName(mk.group), lag.AttrSource.String(mk.source),
			semconv.MessagingDestinationName(mk.to), lag.AttrStage.String(mk.stage), AttrMoveKind.String(mk.kind),
		}
		if mk.class != "" {
			kv = append(kv, AttrErrorClass.String(mk.class))
		}
		return kv
	}))
}

type commitKey struct {
	group, source string
	committed     bool
}

// Committed counts an ended transaction, its duration and its records.
func (p *Pipeline) Committed(e engine.CommitEvent) {
	ctx := context.Background()
	ck := commitKey{e.Group, e.Source, e.Committed}
	set := p.commitSets.get(ck, func(ck commitKey) []attribute.KeyValue {
		outcome := "aborted"
		if ck.committed {
			outcome = "committed"
		}
		return []attribute.KeyValue{semconv.MessagingConsumerGroupName(ck.group), lag.AttrSource.String(ck.source), AttrOutcome.String(outcome)}
	})
	p.txns.Add(ctx, 1, set)
	p.txnDuration.Record(ctx, e.Duration.Seconds(), set)
	if e.Records > 0 {
		p.txnRecords.Add(ctx, int64(e.Records), set)
	}
}
