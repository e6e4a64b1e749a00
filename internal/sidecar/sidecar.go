// Package sidecar assembles a whole kretry process from a config.Config: the
// embedded broker when kafka.brokers is [embedded], one engine per
// configured topic delivering over HTTP (each attempt a span when tracing is
// on), and the health endpoint. `kretry run` is sidecar.Run; tests and
// `kretry demo` start it the same way.
package sidecar

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.opentelemetry.io/otel/trace"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/pkg/flow"
)

// Options adjust a Run.
type Options struct {
	// Logger; nil uses slog.Default().
	Logger *slog.Logger
	// Deliverer replaces HTTP delivery to app.url (in-process embedding,
	// tests); nil delivers over HTTP.
	Deliverer delivery.Deliverer
	// TracerProvider, when set, traces every delivery attempt with it
	// (delivery.TraceDeliveries), whatever tracing.enabled says: for
	// tests and for programs with an OpenTelemetry pipeline of their own.
	// nil: tracing.enabled exports the spans to tracing.otlp_endpoint.
	TracerProvider trace.TracerProvider
	// Started, when set, is called once every engine has joined its group
	// and received its first assignment (when /readyz turns ready), with
	// the sidecar (for its broker addresses and engine stats).
	Started func(*Sidecar)
}

// Sidecar is a running kretry process.
type Sidecar struct {
	// Brokers are the seed brokers in use (the embedded broker's address
	// when it runs).
	Brokers []string
	// Engines, one per configured topic, in config order.
	Engines []*engine.Engine
	ready   atomic.Bool
	// gates are the engines' overload gates: /readyz says when one is open.
	gates []gated
}

// Run runs kretry as configured until ctx is cancelled, then shuts down
// cleanly: in-flight deliveries finish (or are abandoned after app.timeout
// and delivered again later), the last batch commits, the group is left and
// the embedded broker, if any, is flushed and closed. cfg must be validated.
// It returns startup errors (an *UnreachableError when no broker answers,
// a *SecurityError when TLS or SASL fails, a topic partition mismatch, an
// address in use) and fatal engine errors.
func Run(ctx context.Context, cfg *config.Config, o Options) (err error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sidecar{Brokers: cfg.Kafka.Brokers}
	// A stop requested while starting (SIGTERM during the broker check or
	// the topics' set-up) cuts the start short with the context's error:
	// that is the clean stop that was asked for, not a failure to report.
	starting := true
	defer func() {
		if starting && err != nil && ctx.Err() != nil {
			log.Info("stopped while starting", "cut_short", err)
			err = nil
		}
	}()
	createSource := int32(0)
	if len(cfg.Kafka.Brokers) == 1 && cfg.Kafka.Brokers[0] == config.Embedded {
		b, err := startEmbedded(cfg, log)
		if err != nil {
			return err
		}
		defer b.Close()
		s.Brokers, createSource = b.Addrs(), cfg.Embedded.Partitions
	}

	kc, err := NewClients(&cfg.Kafka, s.Brokers, log)
	if err != nil {
		return err
	}
	if err := kc.Ping(ctx); err != nil {
		return err
	}
	clientOpts := kc.Opts() // the engines add their own options

	d := o.Deliverer
	if d == nil {
		h, err := newHTTP(cfg)
		if err != nil {
			return err
		}
		defer h.Close()
		d = h
	}

	// Tracing: a span per delivery attempt (trace.go); the provider stops
	// after the engines, so the last attempts' spans are exported.
	tp, stopTracing, err := startTracing(ctx, cfg, o.TracerProvider, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	// Metrics: /metrics, the engines' Observer, the lag monitor (observe.go).
	obs, err := newObservability(cfg, kc, log)
	if err != nil {
		return err
	}
	defer obs.close()
	// One log line per change of the app's state, and its gauge (dependency.go).
	health, target := withHealth(d, cfg, log)
	if err := obs.watchDependency(target, health); err != nil {
		return err
	}
	d = health
	stopDLQMetrics, err := startDLQMetrics(ctx, cfg, obs, clientOpts, log) // dlqmetrics.go: waiting records, redrive results
	if err != nil {
		return err
	}
	defer stopDLQMetrics()

	stopServing, err := s.serveMetrics(cfg, obs, log)
	if err != nil {
		return err
	}
	defer stopServing()
	stopAdmin, err := startAdmin(ctx, cfg, clientOpts, log) // admin.go: DLQ admin API and page
	if err != nil {
		return err
	}
	defer stopAdmin()

	defer func() {
		if !starting {
			return
		}
		// The engines built before the start failed or was cut short
		// may have joined their groups: leave them (before the embedded
		// broker closes), or their static members hold partitions until
		// the session timeout.
		for _, e := range s.Engines {
			e.Close()
		}
	}()
	for _, t := range cfg.Topics {
		o := cfg.EngineOptions(&t)
		o.Brokers, o.ClientOpts, o.CreateSource, o.Logger = s.Brokers, clientOpts, createSource, log
		o.Deliverer = delivery.TraceDeliveries(d, tp, t.Group, *o.Statuses)
		if err := s.addEngine(ctx, &t, o, cfg, obs, log); err != nil {
			return err
		}
	}

	starting = false
	return s.run(ctx, cfg, obs, o.Started, log)
}

// run runs the engines until ctx ends or one fails for good (it stops
// the others), reporting ready once every engine has its first
// assignment; it returns once the deliveries in flight ended and the
// engines committed.
func (s *Sidecar) run(ctx context.Context, cfg *config.Config, obs *observability, started func(*Sidecar), log *slog.Logger) error {
	var wg sync.WaitGroup
	errs := make([]error, len(s.Engines))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, e := range s.Engines {
		wg.Go(func() {
			if err := e.Run(rctx); err != nil {
				errs[i] = fmt.Errorf("topic %q: %w", cfg.Topics[i].Name, withAuthHint(err, cfg))
				cancel() // one fatal engine stops the process: let the orchestrator restart it
			}
		})
	}
	wg.Go(func() { obs.run(rctx) })
	if s.waitJoined(rctx) {
		s.ready.Store(true)
		log.Info("ready: every topic's engine has joined its group and has its first assignment")
		if started != nil {
			started(s)
		}
	}
	<-rctx.Done()
	s.ready.Store(false)
	var inFlight int64
	for _, e := range s.Engines {
		inFlight += e.Stats().InFlight.Load()
	}
	log.Info("shutting down: no new deliveries; waiting for the deliveries in flight, then committing",
		"in_flight", inFlight, "grace", cfg.App.Timeout)
	wg.Wait()
	return errors.Join(errs...)
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
	ln, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen %s: %w", cfg.Metrics.Listen, err)
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
	for _, w := range e.Topics().Warnings { // a DLQ that keeps records for less time than its source
		log.Warn(w, "topic", t.Name)
	}
	obs.watchEngine(t.Group, t.Name, e)
	return nil
}

// withAuthHint adds to an engine's authentication failure what to check.
func withAuthHint(err error, cfg *config.Config) error {
	switch {
	case errors.Is(err, engine.ErrAuthFailed) && errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("%w; check kafka.sasl.username (%q) and kafka.sasl.password (KRETRY_KAFKA__SASL__PASSWORD): a password changed on the cluster takes a restart with the new one",
			err, cfg.Kafka.SASL.Username)
	case errors.Is(err, engine.ErrAuthFailed):
		return fmt.Errorf("%w; check kafka.tls.cert_file (%q) and kafka.tls.key_file: renew the certificate (a renewed file is read at the next connection)",
			err, cfg.Kafka.TLS.CertFile)
	}
	return err
}

// waitJoined waits until every engine has its first assignment; false
// when ctx ends first.
func (s *Sidecar) waitJoined(ctx context.Context) bool {
	for _, e := range s.Engines {
		select {
		case <-e.Joined():
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// Ready reports whether every engine has joined its group and received
// its first assignment (possibly empty: with more instances than
// partitions an instance is ready with none), and Run is not shutting
// down. /readyz answers that, and 503 as well while a topic's breaker is
// open or probing (Open says which).
func (s *Sidecar) Ready() bool { return s.ready.Load() }

// Open describes the topics whose breakers are open or probing ("" when
// none), as /readyz does.
func (s *Sidecar) Open() string { return notReady(s.gates) }

// healthHandler serves /healthz (the process is up) and /readyz (see
// Ready).
func (s *Sidecar) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		if open := notReady(s.gates); open != "" {
			// Delivery is paused: the app or its dependency is failing
			// (docs/OVERLOAD.md). The process itself is fine (/healthz).
			http.Error(w, "not ready: "+open, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// TransactionalID is flow.TransactionalID, for the tests that name an
// instance's transactional id.
func TransactionalID(prefix, instance, group string) string {
	return flow.TransactionalID(prefix, instance, group)
}
