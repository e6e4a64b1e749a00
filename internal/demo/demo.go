// Package demo is `kretry demo`: the whole main job in one process. It
// starts the embedded broker, a sample HTTP app that fails some records on
// purpose, the sidecar with short tiers, produces keyed order records, shows
// progress and ends with a report checked by the conservation checker
// (internal/check).
//
// The sample app decides by a hash of the record's ce-id, so the same record
// behaves the same on every run, and by how often it has seen the record,
// as a real transient failure passes with time:
//
//	 8%  answer 503 the first 2 times, then 200  (tier 1, tier 2, done)
//	 3%  answer 422 always                       (DLQ, permanent)
//	 1%  time out the first time, then 200       (tier 1, done)
//	 2%  answer 503 always                       (every tier, DLQ exhausted)
//	86%  answer 200
//
// Counting by kretry's attempt number instead (the ce-attempt header), a record
// the breaker held failed forever: a held delivery keeps its attempt
// number (docs/OVERLOAD.md). And with 5% timing out, the records that time
// out hold most in-flight slots at once (300ms against ~1ms for the
// others) and end together: the breaker opened at the demo's start in
// most runs, its probes were then records failing on their own only, and
// the demo stalled past its deadline in about 1 run of 4. At 1% it opened
// in none of 6 runs.
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/check"
	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/retrytopics"
)

// Options configure a demo run.
type Options struct {
	// Records to produce (default 2000).
	Records int
	// Progress receives a live progress line; nil shows none.
	Progress io.Writer
	// Live redraws one line with \r (a terminal); otherwise a line is
	// printed each second.
	Live bool
	// Timeout bounds the wait for the run to drain (default 60s).
	Timeout time.Duration
	// Logger for the sidecar; nil discards its logs below warn.
	Logger *slog.Logger
}

// Report is the outcome of a run. Counts are records.
type Report struct {
	Produced int `json:"produced"`
	// Delivered counts distinct records the app acknowledged.
	Delivered int `json:"delivered"`
	// Retried maps each tier topic to the records moved into it.
	Retried map[string]int64 `json:"retried"`
	// TierTopics lists the tier topics in tier order.
	TierTopics []string `json:"tier_topics"`
	// DeadLettered counts distinct records in the DLQ.
	DeadLettered int `json:"dead_lettered"`
	// DeadLetteredByClass splits DeadLettered by kretry-error-class.
	DeadLetteredByClass map[string]int `json:"dead_lettered_by_class"`
	// Lost counts records neither acknowledged nor dead-lettered once the
	// run drained; when the demo gave up waiting (TimedOut) they are
	// Unsettled instead, and Lost is 0: the demo cannot tell a record still
	// retrying or held from a lost one without waiting for it.
	Lost int `json:"lost"`
	// TimedOut is true when the demo gave up waiting after TimeoutMS (or
	// was interrupted) with Unsettled records not yet acknowledged or
	// dead-lettered: still in a retry tier, parked, or held by the
	// overload breaker. OK is then false.
	TimedOut bool `json:"timed_out"`
	// Interrupted is true when the demo stopped waiting because it was
	// interrupted (SIGINT, SIGTERM) rather than after TimeoutMS.
	Interrupted bool  `json:"interrupted"`
	TimeoutMS   int64 `json:"timeout_ms"`
	Unsettled   int   `json:"unsettled"`
	// UnsettledIDs are the first of them (ce-id), as LostIDs.
	UnsettledIDs []string `json:"unsettled_ids,omitempty"`
	// Redelivered counts repeated acknowledgements (at-least-once
	// delivery; the app dedups on ce-id).
	Redelivered   int `json:"redelivered"`
	DLQDuplicates int `json:"dlq_duplicates"`
	// Parked counts records parked behind a retrying record of their key.
	Parked int64 `json:"parked"`
	// MaxBlockedKeys is the most keys blocked at once, as sampled.
	MaxBlockedKeys int64 `json:"max_blocked_keys"`
	// OrderViolations counts records the app acknowledged after a later
	// record of their key (must be 0).
	OrderViolations int      `json:"order_violations"`
	OrderExamples   []string `json:"order_examples,omitempty"`
	DurationMS      int64    `json:"duration_ms"`
	// OK: nothing lost, no DLQ duplicate, produced = delivered +
	// dead_lettered, no order violation.
	OK      bool     `json:"ok"`
	LostIDs []string `json:"lost_ids,omitempty"`
	// ExpectedDeadLettered is what the sample app's behaviours predict per
	// class, from the produced ids alone: the DLQ must match it.
	ExpectedDeadLettered map[string]int `json:"expected_dead_lettered"`
}

// Tiers are the demo's retry delays (short, so a run takes seconds).
var Tiers = []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second}

// AppTimeout is the demo's app.timeout. At 300ms, on a loaded machine
// (load 4 on 2 cores), 9 of the first 20 deliveries timed out at the
// demo's start and opened the breaker, whose probes then found only
// records failing on their own (see the app's comment above).
const AppTimeout = time.Second

// Run runs the demo and returns its report. The error is for a demo that
// could not run at all (a port in use, a broker error); a run that lost
// records returns a Report with OK false and a nil error.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.setDefaults()
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &demoRun{o: o, start: time.Now(), ledger: check.NewLedger(), order: check.NewOrder(), byClass: map[string]int{}}

	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 3, Logger: log})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	app, err := startApp(d.ledger, d.order)
	if err != nil {
		return nil, err
	}
	defer app.Close()
	cfg, err := demoConfig(b.Addrs(), app.addr)
	if err != nil {
		return nil, err
	}
	topic := &cfg.Topics[0]
	if err := createTopic(ctx, b.Addrs(), topic.Name, 3); err != nil {
		return nil, err
	}

	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done, err := d.startSidecar(ctx, sctx, cfg, log)
	if done == nil {
		return nil, err
	}
	dlqCl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(topic.DLQ.Topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer dlqCl.Close()
	go d.readDLQ(sctx, dlqCl)

	if d.produced, err = produce(ctx, b.Addrs(), topic.Name, o.Records, d.ledger, d.order); err != nil {
		return nil, err
	}
	timedOut, err := d.wait(ctx, done)
	if err != nil {
		return nil, err
	}
	d.progress(true)
	stop()
	if err := <-done; err != nil {
		return nil, err
	}
	r := d.report(timedOut, topic.Retry.Topics)
	r.Interrupted = r.TimedOut && ctx.Err() != nil
	return r, nil
}

// startSidecar runs kretry as cfg configures it until sctx ends, and
// waits until its engine has its first assignment (d.eng is then set).
// It returns the channel that receives Run's result once the engine has
// started; else nil, with Run's result when Run ended first (nil when it
// stopped cleanly while starting) or ctx's error when ctx ended first.
func (d *demoRun) startSidecar(ctx, sctx context.Context, cfg *config.Config, log *slog.Logger) (<-chan error, error) {
	started := make(chan *sidecar.Sidecar, 1)
	done := make(chan error, 1)
	go func() {
		done <- sidecar.Run(sctx, cfg, sidecar.Options{Logger: log, Started: func(s *sidecar.Sidecar) { started <- s }})
	}()
	select {
	case sc := <-started:
		d.eng = sc.Engines[0]
		return done, nil
	case err := <-done:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// setDefaults fills the unset Records (2000) and Timeout (60s).
func (o *Options) setDefaults() {
	if o.Records <= 0 {
		o.Records = 2000
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
}

// demoConfig is the demo's sidecar config: the defaults, with the
// embedded broker at addrs and the demo app at appAddr.
func demoConfig(addrs []string, appAddr string) (*config.Config, error) {
	cfg := config.Default()
	cfg.Kafka.Brokers = addrs
	cfg.Kafka.FetchMaxWait = 50 * time.Millisecond
	cfg.App.URL = "http://" + appAddr + "/kafka"
	cfg.App.Timeout = AppTimeout
	cfg.App.MaxInFlight = 32
	cfg.Metrics.Listen = ""
	jitter := 0.2
	// The default breaker: its records that time out once (1%, app.timeout
	// 1s) end together, but the breaker judges each over its own flight,
	// during which the rest of the backlog succeeded (docs/OVERLOAD.md,
	// clumping).
	cfg.Topics = []config.Topic{{Name: "orders", Retry: config.Retry{Tiers: Tiers, Jitter: &jitter}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	return cfg, nil
}

// demoRun is one run's ledger and what it samples on the way.
type demoRun struct {
	o        Options
	start    time.Time
	ledger   *check.Ledger
	order    *check.Order
	eng      *engine.Engine
	produced int

	classMu sync.Mutex
	byClass map[string]int // DLQ records by kretry-error-class

	maxBlocked int64
}

// readDLQ reads the DLQ as the operator would (committed records only)
// until ctx ends, into the ledger and byClass.
func (d *demoRun) readDLQ(ctx context.Context, cl *kgo.Client) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachRecord(func(r *kgo.Record) {
			o, _ := retrytopics.ReadOrigin(r, false, 0)
			d.ledger.DeadLettered(o.ID())
			for _, h := range r.Headers {
				if h.Key == retrytopics.HeaderErrorClass {
					d.classMu.Lock()
					d.byClass[string(h.Value)]++
					d.classMu.Unlock()
					break
				}
			}
		})
	}
}

// wait waits until every record is settled, printing progress, or until
// the timeout or ctx (timedOut true); an error when the sidecar stopped.
func (d *demoRun) wait(ctx context.Context, done <-chan error) (timedOut bool, err error) {
	every := time.Second
	if d.o.Live {
		every = 100 * time.Millisecond
	}
	sample := time.NewTicker(50 * time.Millisecond)
	defer sample.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	deadline := time.After(d.o.Timeout)
	for !d.ledger.Settled() {
		select {
		case <-tick.C:
			d.progress(false)
		case <-sample.C:
			d.maxBlocked = max(d.maxBlocked, d.eng.Stats().BlockedKeys.Load())
		case <-deadline:
			return true, nil
		case err := <-done:
			return false, fmt.Errorf("sidecar stopped: %w", err)
		case <-ctx.Done():
			return true, nil
		}
	}
	return false, nil
}

// progress prints one progress line (final: the last one).
func (d *demoRun) progress(final bool) {
	if d.o.Progress == nil {
		return
	}
	c := d.ledger.Check()
	st := d.eng.Stats()
	blocked := st.BlockedKeys.Load()
	d.maxBlocked = max(d.maxBlocked, blocked)
	line := fmt.Sprintf("produced %d  delivered %d  retried %d/%d/%d  dead-lettered %d  blocked keys %d  parked %d  in flight %d  %.1fs",
		d.produced, c.Delivered, st.Retried[0].Load(), st.Retried[1].Load(), st.Retried[2].Load(),
		c.DeadLettered, blocked, st.ParkedRecords.Load(), st.InFlight.Load(), time.Since(d.start).Seconds())
	switch {
	case d.o.Live:
		fmt.Fprintf(d.o.Progress, "\r\033[K%s", line)
		if final {
			fmt.Fprintln(d.o.Progress)
		}
	default:
		fmt.Fprintln(d.o.Progress, line)
	}
}

// report is the run's Report; tiers are the retry tier topics.
func (d *demoRun) report(timedOut bool, tiers []string) *Report {
	c := d.ledger.Check()
	violations, examples := d.order.Violations()
	st := d.eng.Stats()
	r := &Report{
		Produced:        c.Produced,
		Delivered:       c.Delivered,
		Retried:         map[string]int64{},
		DeadLettered:    c.DeadLettered,
		Lost:            c.Lost,
		Redelivered:     c.Redelivered,
		DLQDuplicates:   c.DLQDuplicates,
		DurationMS:      time.Since(d.start).Milliseconds(),
		OK:              c.OK() && violations == 0,
		LostIDs:         c.LostIDs,
		Parked:          st.Parked.Load(),
		MaxBlockedKeys:  d.maxBlocked,
		OrderViolations: violations,
		OrderExamples:   examples,
		TimeoutMS:       d.o.Timeout.Milliseconds(),
		TierTopics:      tiers,
	}
	if timedOut && c.Lost > 0 {
		r.TimedOut, r.Unsettled, r.UnsettledIDs = true, c.Lost, c.LostIDs
		r.Lost, r.LostIDs = 0, nil
	}
	d.classMu.Lock()
	r.DeadLetteredByClass = maps.Clone(d.byClass)
	d.classMu.Unlock()
	r.ExpectedDeadLettered = map[string]int{"permanent": 0, "exhausted": 0}
	for _, id := range d.ledger.ProducedIDs() {
		switch BehaviourOf(id) {
		case Permanent:
			r.ExpectedDeadLettered["permanent"]++
		case AlwaysFlaky:
			r.ExpectedDeadLettered["exhausted"]++
		}
	}
	for i, t := range tiers {
		r.Retried[t] = st.Retried[i].Load()
	}
	return r
}

func createTopic(ctx context.Context, addrs []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic)
	return err
}
