// Package sidecar assembles a whole kretry process from a config.Config: the
// embedded broker when kafka.brokers is [embedded], one engine per
// configured topic delivering over HTTP, and the health endpoint. `kretry
// run` is sidecar.Run; tests and `kretry demo` start it the same way.
package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/kretry/kretry/pkg/broker"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/retrytopics"
)

// Options adjust a Run.
type Options struct {
	// Logger; nil uses slog.Default().
	Logger *slog.Logger
	// Deliverer replaces HTTP delivery to app.url (in-process embedding,
	// tests); nil delivers over HTTP.
	Deliverer delivery.Deliverer
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
}

// Run runs kretry as configured until ctx is cancelled, then shuts down
// cleanly: in-flight deliveries finish (or are abandoned after app.timeout
// and delivered again later), the last batch commits, the group is left and
// the embedded broker, if any, is flushed and closed. cfg must be validated.
// It returns startup errors (an *UnreachableError when no broker answers,
// a topic partition mismatch, an address in use) and fatal engine errors.
func Run(ctx context.Context, cfg *config.Config, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Sidecar{Brokers: cfg.Kafka.Brokers}
	createSource := int32(0)
	if len(cfg.Kafka.Brokers) == 1 && cfg.Kafka.Brokers[0] == config.Embedded {
		b, err := broker.Start(broker.Config{
			Listen:     cfg.Embedded.Listen,
			DataDir:    cfg.Embedded.DataDir,
			Partitions: cfg.Embedded.Partitions,
			Logger:     log,
		})
		if err != nil {
			return err
		}
		defer b.Close()
		s.Brokers = b.Addrs()
		createSource = cfg.Embedded.Partitions
		log.Info("embedded broker started", "addr", s.Brokers[0], "data_dir", cfg.Embedded.DataDir)
	}

	clientOpts, err := ClientOpts(&cfg.Kafka, log)
	if err != nil {
		return err
	}
	if err := ping(ctx, clientOpts, s.Brokers); err != nil {
		return err
	}
	d := o.Deliverer
	if d == nil {
		h, err := delivery.NewHTTP(delivery.HTTPConfig{
			URL:         cfg.App.URL,
			Timeout:     cfg.App.Timeout,
			MaxInFlight: cfg.App.MaxInFlight,
			CEType:      cfg.App.CEType,
		})
		if err != nil {
			return err
		}
		defer h.Close()
		d = h
	}

	// Metrics: /metrics, the engines' Observer, the lag monitor (observe.go).
	obs, err := newObservability(cfg, s.Brokers, clientOpts, log)
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

	var srv *http.Server
	if cfg.Metrics.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Metrics.Listen)
		if err != nil {
			return fmt.Errorf("metrics.listen %s: %w", cfg.Metrics.Listen, err)
		}
		srv = &http.Server{Handler: obs.handler(s.healthHandler()), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}()
		log.Info("metrics and health endpoint listening", "addr", ln.Addr().String())
	}

	instance := cfg.Kafka.InstanceIDOrHost()
	for _, t := range cfg.Topics {
		plan := PlanFor(&t)
		statuses := delivery.Statuses{Permanent: t.Classify.Permanent, Transient: t.Classify.Transient}
		e, err := engine.New(ctx, engine.Options{
			Brokers:         s.Brokers,
			ClientOpts:      clientOpts,
			GroupOpts:       groupOpts(&cfg.Kafka),
			Plan:            plan,
			Group:           t.Group,
			TransactionalID: TransactionalID(cfg.Kafka.TransactionalID, instance, t.Group),
			InstanceID:      instance,
			Deliverer:       d,
			Statuses:        &statuses,
			MaxInFlight:     cfg.App.MaxInFlight,
			DeliveryTimeout: cfg.App.Timeout,
			FetchMaxWait:    cfg.Kafka.FetchMaxWait,
			CreateSource:    createSource,
			Ordering:        t.Ordering,
			ParkingTopic:    t.Parking.Topic,
			OnDeadLetter:    t.OnDeadLetter,
			MaxParked:       t.Parking.MaxRecords,
			Observer:        obs.observer(),
			Logger:          log,
		})
		if err != nil {
			return fmt.Errorf("topic %q: %w", t.Name, err)
		}
		s.Engines = append(s.Engines, e)
		obs.watchEngine(t.Group, t.Name, e)
	}

	var wg sync.WaitGroup
	errs := make([]error, len(s.Engines))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, e := range s.Engines {
		wg.Go(func() {
			if err := e.Run(rctx); err != nil {
				errs[i] = fmt.Errorf("topic %q: %w", cfg.Topics[i].Name, err)
				cancel() // one fatal engine stops the process: let the orchestrator restart it
			}
		})
	}
	wg.Go(func() { obs.run(rctx) })
	if s.waitJoined(rctx) {
		s.ready.Store(true)
		log.Info("ready: every topic's engine has joined its group and has its first assignment")
		if o.Started != nil {
			o.Started(s)
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

// Ready reports what /readyz answers: every engine has joined its group
// and received its first assignment (possibly empty: with more instances
// than partitions an instance is ready with none), and Run is not
// shutting down.
func (s *Sidecar) Ready() bool { return s.ready.Load() }

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
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// ping checks that a broker answers before anything else is started, so
// that the error names kafka.brokers instead of a topic check's request.
func ping(ctx context.Context, clientOpts []kgo.Opt, brokers []string) error {
	cl, err := kgo.NewClient(append(clientOpts[:len(clientOpts):len(clientOpts)], kgo.SeedBrokers(brokers...))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return Ping(ctx, cl, brokers, false)
}

// PlanFor returns the retry plan of a defaulted topic config.
func PlanFor(t *config.Topic) retrytopics.Plan {
	p := retrytopics.Plan{Source: t.Name, DLQ: t.DLQ.Topic}
	if t.Retry.Jitter != nil {
		p.Jitter = *t.Retry.Jitter
	}
	for i, d := range t.Retry.Tiers {
		p.Tiers = append(p.Tiers, retrytopics.Tier{Topic: t.Retry.Topics[i], Delay: d})
	}
	return p
}

// TransactionalID is <prefix>-<instance>-<group> (kafka.transactional_id,
// kafka.instance_id): stable across restarts of one instance (so a
// restarted instance aborts what its predecessor left open) and distinct
// between live instances (so they do not fence each other).
func TransactionalID(prefix, instance, group string) string {
	return prefix + "-" + instance + "-" + group
}

// groupOpts are the consumer-group settings of every engine: the session
// timeout, and a heartbeat every second (at most a third of the session
// timeout, Kafka's guidance) instead of franz-go's 3s, so that the others
// learn of a leaving instance's rebalance within a second.
func groupOpts(k *config.Kafka) []kgo.Opt {
	return []kgo.Opt{kgo.SessionTimeout(k.SessionTimeout), kgo.HeartbeatInterval(min(time.Second, k.SessionTimeout/3))}
}

// ClientOpts turns the kafka section into franz-go options: client ID,
// TLS, SASL and the client's own logs through slog (kslog) at warn level.
func ClientOpts(k *config.Kafka, log *slog.Logger) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.ClientID(k.ClientID),
		kgo.WithLogger(kslog.New(slog.New(minLevel{log.Handler(), kafkaLogLevel(log)}).With("component", "kafka-client"))),
	}
	if k.TLS.Enabled {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: k.TLS.InsecureSkipVerify} //nolint:gosec // opt-in by config
		if k.TLS.CAFile != "" {
			pem, err := os.ReadFile(k.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka.tls.ca_file: %q holds no PEM certificate", k.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		if k.TLS.CertFile != "" || k.TLS.KeyFile != "" {
			cert, err := tls.LoadX509KeyPair(k.TLS.CertFile, k.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls.cert_file/key_file: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch strings.ToLower(k.SASL.Mechanism) {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("kafka.sasl.mechanism: %q is not supported", k.SASL.Mechanism)
	}
	return opts, nil
}

// kafkaLogLevel is the least level of franz-go's own logs: warn, or info
// when kretry logs at debug. franz-go logs every transaction at info, which
// would be a line per batch at kretry's default level.
func kafkaLogLevel(log *slog.Logger) slog.Level {
	if log.Enabled(context.Background(), slog.LevelDebug) {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}
