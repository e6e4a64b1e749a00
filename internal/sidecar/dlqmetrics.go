package sidecar

import (
	"context"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/pkg/config"
)

// startDLQMetrics follows each topic's DLQ and its marks topic and exports
// the waiting records, the oldest waiting age and the redrive results
// (dlq.RegisterMetrics) on the metrics endpoint; stop ends it.
func startDLQMetrics(ctx context.Context, cfg *config.Config, o *observability, opts []kgo.Opt, log *slog.Logger) (func(), error) {
	if o.tel == nil {
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	var clients []*dlq.Client
	var trackers []*dlq.Tracker
	var running sync.WaitGroup
	// stop returns once every tracker has closed its reader: the embedded
	// broker closes next, and a reader still fetching from it logs a
	// connection error after the clean stop.
	stop := func() {
		cancel()
		running.Wait()
		for _, c := range clients {
			c.Close()
		}
	}
	for _, t := range cfg.Topics {
		dt, err := dlq.TopicOf(cfg, t.Name)
		if err == nil {
			var c *dlq.Client
			if c, err = dlq.New(dt, opts, dlq.WithLogger(log)); err == nil {
				clients = append(clients, c)
				tr := dlq.NewTracker(c)
				trackers = append(trackers, tr)
				running.Go(func() { tr.Run(ctx) })
			}
		}
		if err != nil {
			stop()
			return nil, err
		}
	}
	unregister, err := dlq.RegisterMetrics(o.tel.MeterProvider(), trackers...)
	if err != nil {
		stop()
		return nil, err
	}
	return func() { unregister(); stop() }, nil
}
