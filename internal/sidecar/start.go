package sidecar

// Run's start steps, in the order it takes them: the embedded broker, the
// clients, the delivery to the app, the endpoints, the engines.

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
)

// stops are the stops of what Run started, in the order it started them.
type stops []func()

// push adds stop to st.
func (st *stops) push(stop func()) { *st = append(*st, stop) }

// run calls the stops in st, the last pushed first, each as a deferred
// call of its own (a stop that panics does not skip the ones after it).
func (st *stops) run() {
	for _, stop := range *st {
		defer stop()
	}
}

// engineDeps are what every topic's engine is built with, besides its
// topic's options.
type engineDeps struct {
	// clientOpts are the Kafka clients' options; each engine adds its own.
	clientOpts []kgo.Opt
	// createSource is engine.Options.CreateSource: the embedded broker's
	// partitions, 0 with an external cluster.
	createSource int32
	// deliverer delivers to the app (health-watched once the endpoints
	// have started); tracer traces each attempt.
	deliverer delivery.Deliverer
	tracer    trace.TracerProvider
	obs       *observability
}

// startBroker starts the embedded broker when kafka.brokers is
// [embedded], pointing s.Brokers at it, and pushes its Close onto st. It
// returns the partitions the engines create missing source topics with:
// embedded.partitions, or 0 when the brokers are an external cluster's.
func (s *Sidecar) startBroker(cfg *config.Config, st *stops, log *slog.Logger) (createSource int32, err error) {
	if len(cfg.Kafka.Brokers) != 1 || cfg.Kafka.Brokers[0] != config.Embedded {
		return 0, nil
	}
	b, err := startEmbedded(cfg, log)
	if err != nil {
		return 0, err
	}
	st.push(b.Close)
	s.Brokers = b.Addrs()
	return cfg.Embedded.Partitions, nil
}

// connect builds the Kafka clients of kafka.* for brokers and checks that
// the cluster answers; it returns Ping's *UnreachableError or
// *SecurityError when it does not.
func connect(ctx context.Context, cfg *config.Config, brokers []string, log *slog.Logger) (*Clients, error) {
	kc, err := NewClients(&cfg.Kafka, brokers, log)
	if err != nil {
		return nil, err
	}
	if err := kc.Ping(ctx); err != nil {
		return nil, err
	}
	return kc, nil
}

// startDelivery returns the deliverer to the app (o.Deliverer, or HTTP to
// app.url) and the tracer provider of its attempts, pushing their stops
// onto st.
func startDelivery(ctx context.Context, cfg *config.Config, o Options, st *stops, log *slog.Logger) (delivery.Deliverer, trace.TracerProvider, error) {
	d := o.Deliverer
	if d == nil {
		h, err := newHTTP(cfg)
		if err != nil {
			return nil, nil, err
		}
		st.push(h.Close)
		d = h
	}

	// Tracing: a span per delivery attempt (trace.go); the provider stops
	// after the engines, so the last attempts' spans are exported.
	tp, stopTracing, err := startTracing(ctx, cfg, o.TracerProvider, log)
	if err != nil {
		return nil, nil, err
	}
	st.push(stopTracing)
	return d, tp, nil
}

// startEndpoints starts the metrics (the engines' Observer, the lag
// monitor), the app's health watch, the DLQ metrics, the /metrics and
// health endpoint and the DLQ admin API, pushing their stops onto st. It
// returns the observability and deps.deliverer wrapped in the health
// watch.
func (s *Sidecar) startEndpoints(ctx context.Context, cfg *config.Config, kc *Clients, deps engineDeps, st *stops, log *slog.Logger) (*observability, delivery.Deliverer, error) {
	// Metrics: /metrics, the engines' Observer, the lag monitor (observe.go).
	obs, err := newObservability(cfg, kc, log)
	if err != nil {
		return nil, nil, err
	}
	st.push(obs.close)
	// One log line per change of the app's state, and its gauge (dependency.go).
	health, target := withHealth(deps.deliverer, cfg, log)
	if err := obs.watchDependency(target, health); err != nil {
		return nil, nil, err
	}
	stopDLQMetrics, err := startDLQMetrics(ctx, cfg, obs, deps.clientOpts, log) // dlqmetrics.go: waiting records, redrive results
	if err != nil {
		return nil, nil, err
	}
	st.push(stopDLQMetrics)

	stopServing, err := s.serveMetrics(cfg, obs, log)
	if err != nil {
		return nil, nil, err
	}
	st.push(stopServing)
	stopAdmin, err := startAdmin(ctx, cfg, deps.clientOpts, log) // admin.go: DLQ admin API and page
	if err != nil {
		return nil, nil, err
	}
	st.push(stopAdmin)
	return obs, health, nil
}

// startEngines builds one engine per configured topic, in config order,
// each delivering through deps.deliverer with a span per attempt; it
// returns the first topic's error.
func (s *Sidecar) startEngines(ctx context.Context, cfg *config.Config, deps engineDeps, log *slog.Logger) error {
	for _, t := range cfg.Topics {
		o := cfg.EngineOptions(&t)
		o.Brokers, o.ClientOpts, o.CreateSource, o.Logger = s.Brokers, deps.clientOpts, deps.createSource, log
		o.Deliverer = delivery.TraceDeliveries(deps.deliverer, deps.tracer, t.Group, *o.Statuses)
		if err := s.addEngine(ctx, &t, o, cfg, deps.obs, log); err != nil {
			return err
		}
	}
	return nil
}

// startEmbedded starts the embedded broker of embedded.*.
func startEmbedded(cfg *config.Config, log *slog.Logger) (*broker.Broker, error) {
	b, err := broker.Start(broker.Config{
		Listen:     cfg.Embedded.Listen,
		ListenFrom: "embedded.listen",
		DataDir:    cfg.Embedded.DataDir,
		Partitions: cfg.Embedded.Partitions,
		Logger:     log,
	})
	if err != nil {
		return nil, err
	}
	log.Info("embedded broker started", "addr", b.Addrs()[0], "data_dir", cfg.Embedded.DataDir)
	return b, nil
}

// newHTTP is the HTTP deliverer of app.*.
func newHTTP(cfg *config.Config) (*delivery.HTTP, error) {
	return delivery.NewHTTP(delivery.HTTPConfig{
		URL:         cfg.App.URL,
		Timeout:     cfg.App.Timeout,
		MaxInFlight: cfg.App.MaxInFlight.Ceiling(),
		CEType:      cfg.App.CEType,
	})
}

// serveMetrics serves /metrics and the health endpoints on metrics.listen
// (nothing when it is empty) until the returned stop is called.
func (s *Sidecar) serveMetrics(cfg *config.Config, obs *observability, log *slog.Logger) (stop func(), err error) {
	if cfg.Metrics.Listen == "" {
		return func() {}, nil
	}
	ln, err := listen("metrics.listen", cfg.Metrics.Listen)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: obs.handler(s.healthHandler()), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	log.Info("metrics and health endpoint listening", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}, nil
}

// addEngine builds topic t's engine from o with its overload gate, and
// watches both in the metrics.
func (s *Sidecar) addEngine(ctx context.Context, t *config.Topic, o engine.Options, cfg *config.Config, obs *observability, log *slog.Logger) error {
	// The identity this engine fences with: two processes sharing it
	// fence each other (README: Instance identity).
	log.Info("engine identity", "topic", t.Name, "group", t.Group, "instance_id", o.InstanceID, "transactional_id", o.TransactionalID)
	gate := cfg.OverloadGate(t, log) // pkg/config/engine.go; the gate's metrics and /readyz: overload.go
	if err := obs.watchGate(t.Group, t.Name, gate); err != nil {
		return err
	}
	s.gates = append(s.gates, gated{topic: t.Name, gate: gate})
	o.Observer, o.Overload = obs.observer(), gate
	e, err := engine.New(ctx, o)
	if err != nil {
		return fmt.Errorf("topic %q: %w", t.Name, err)
	}
	s.Engines = append(s.Engines, e)
	if e.Topics().CreatedSource { // a mistyped topics[].name consumes an empty topic of its own
		log.Info("created the source topic on the embedded broker: it did not exist, so no record was on it; if your records are on another topic, correct topics[].name", "topic", t.Name, "partitions", e.Topics().Partitions)
	}
	for _, w := range e.Topics().Warnings { // a stage that keeps records too short a time (retrytopics/retention.go)
		log.Warn(w, "topic", t.Name)
	}
	obs.watchEngine(t.Group, t.Name, e)
	return nil
}
