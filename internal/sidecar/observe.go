package sidecar

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/telemetry"
	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/engine"
)

// observability is the metrics side of a sidecar: the telemetry behind
// /metrics, the engines' Observer and gauges, and the lag monitor. With
// metrics.listen "" it is inert: nothing would read what it measures.
type observability struct {
	log   *slog.Logger
	tel   *telemetry.Telemetry
	cl    *kgo.Client
	mon   *lag.Monitor
	stops []func()
}

// newObservability builds the telemetry and, unless lag.interval is 0, the
// lag monitor with a client of its own (no consumer group).
func newObservability(cfg *config.Config, kc *Clients, log *slog.Logger) (*observability, error) {
	o := &observability{log: log}
	if cfg.Metrics.Listen == "" {
		return o, nil
	}
	host, _ := os.Hostname()
	tel, err := telemetry.New(telemetry.Options{InstanceID: host})
	if err != nil {
		return nil, err
	}
	o.tel = tel
	if cfg.Lag.Interval <= 0 {
		return o, nil
	}
	cl, err := kc.New()
	if err != nil {
		o.close()
		return nil, err
	}
	o.cl = cl
	mon, err := lag.New(cl, lag.FromConfig(cfg), lag.WithLogger(log.With("component", "lag")), lag.WithMeterProvider(tel.MeterProvider()))
	if err != nil {
		o.close()
		return nil, err
	}
	o.mon = mon
	return o, nil
}

// handler serves /metrics beside health's /healthz and /readyz.
func (o *observability) handler(health http.Handler) http.Handler {
	if o.tel == nil {
		return health
	}
	mux := http.NewServeMux()
	mux.Handle("/", health)
	mux.Handle("/metrics", o.tel.Handler())
	return mux
}

// observer is the engines' Observer: nil (observe nothing) without
// metrics.
func (o *observability) observer() engine.Observer { return o.tel.Observer() }

// watchEngine reports an engine's in-flight deliveries, blocked keys,
// parked records and held keys.
func (o *observability) watchEngine(group, source string, e *engine.Engine) {
	st := e.Stats()
	o.stops = append(o.stops, o.tel.ObserveEngine(group, source, telemetry.EngineGauges{
		InFlight:      st.InFlight.Load,
		BlockedKeys:   st.BlockedKeys.Load,
		ParkedRecords: st.ParkedRecords.Load,
		HeldKeys:      st.HeldKeys.Load,
	}))
}

// run runs the lag monitor until ctx is done.
func (o *observability) run(ctx context.Context) {
	if o.mon != nil {
		o.mon.Run(ctx)
	}
}

func (o *observability) close() {
	for _, stop := range o.stops {
		stop()
	}
	if o.mon != nil {
		o.mon.Close()
	}
	if o.cl != nil {
		o.cl.Close()
	}
	if o.tel != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.tel.Shutdown(ctx); err != nil {
			o.log.Warn("metrics shutdown", "err", err)
		}
	}
}
