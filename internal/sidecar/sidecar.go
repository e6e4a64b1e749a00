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
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"go.opentelemetry.io/otel/trace"

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
	// Each step below pushes the stop of what it started: they run when
	// Run returns, the last started first.
	var stops stops
	defer stops.run()

	createSource, err := s.startBroker(cfg, &stops, log)
	if err != nil {
		return err
	}
	kc, err := connect(ctx, cfg, s.Brokers, log)
	if err != nil {
		return err
	}
	deps := engineDeps{clientOpts: kc.Opts(), createSource: createSource} // the engines add their own options
	deps.deliverer, deps.tracer, err = startDelivery(ctx, cfg, o, &stops, log)
	if err != nil {
		return err
	}
	deps.obs, deps.deliverer, err = s.startEndpoints(ctx, cfg, kc, deps, &stops, log)
	if err != nil {
		return err
	}

	stops.push(func() {
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
	})
	if err := s.startEngines(ctx, cfg, deps, log); err != nil {
		return err
	}

	starting = false
	return s.run(ctx, cfg, deps.obs, o.Started, log)
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
				errs[i] = fmt.Errorf("topic %q: %w", cfg.Topics[i].Name, withFenceHint(withAuthHint(err, cfg), cfg))
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

// withFenceHint adds to a fenced engine's error (engine.ErrFenced) that
// this process also serves the embedded broker, which stops with it: the
// instance that took over was dialing it, and loses its broker too.
func withFenceHint(err error, cfg *config.Config) error {
	if _, embedded := SeedBrokers(&cfg.Kafka, &cfg.Embedded); !embedded || !errors.Is(err, engine.ErrFenced) {
		return err
	}
	return fmt.Errorf("%w; but this process also serves the embedded broker (kafka.brokers: [embedded], %s), which stops with it: the instance that took over loses its broker as well. Share a broker with `kretry broker` or an external one instead",
		err, cfg.Embedded.Listen)
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
