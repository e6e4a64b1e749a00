// Package engine runs kretry's consume → deliver → move loop for one source
// topic and its retry tiers, in-process. It is what `kretry run` runs, and Go
// programs can run it with a delivery.HandlerFunc instead of HTTP:
//
//	e, err := engine.New(engine.Options{
//		Brokers: []string{"127.0.0.1:9092"},
//		Plan:    plan,                  // retrytopics.Plan: source, tiers, DLQ
//		Group:   "orders-kretry",
//		Deliverer: delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
//			return handle(m) // nil: done; delivery.Permanent(err): DLQ; other errors: retry
//		}),
//	})
//	if err != nil { … }
//	err = e.Run(ctx) // until ctx is cancelled, then a clean shutdown
//
// # How a batch moves
//
// One consumer group reads the source and every tier topic. Each poll yields
// a batch. Records of a tier partition are delivered only once their
// kretry-due-time has come: the first record not yet due stops its
// partition, whose position is set back to that record and whose fetching is
// paused until the due time (a timer resumes it; no busy loop). Deliverable
// records are delivered concurrently, at most Options.MaxInFlight at a time,
// records of one key in one partition strictly one after another. Then one
// Kafka transaction carries every move of the batch (to a tier or the DLQ)
// with the offset commit of the whole batch (DESIGN.md invariant 2). A
// rebalance waits for the batch to end (kgo.BlockRebalanceOnPoll); a failed
// or aborted transaction rewinds to the last commit and the batch is
// delivered again, so delivery is at least once and moves exactly once.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// Version is written in kretry-version on every moved record.
var Version = "dev"

// Options configures one Engine. Brokers, Plan, Group and Deliverer are
// required.
type Options struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// ClientOpts are extra franz-go options for every client of the engine
	// (TLS, SASL, dialer, logger …).
	ClientOpts []kgo.Opt
	// GroupOpts are extra franz-go options for the group client only
	// (balancers, session and rebalance timeouts). They must not set the
	// partition callbacks, which the engine needs for itself.
	GroupOpts []kgo.Opt
	// Plan is the source topic, its tiers and its DLQ.
	Plan retrytopics.Plan
	// Group is the consumer group for the source and its tiers.
	Group string
	// TransactionalID of the engine's producer. Every instance of one group
	// needs its own, stable across restarts so that a restarted instance
	// aborts the transaction its predecessor left open. Default
	// "kretry-<hostname>-<group>".
	TransactionalID string
	// Deliverer hands records to the application.
	Deliverer delivery.Deliverer
	// Statuses classify HTTP statuses; default delivery.DefaultStatuses.
	Statuses *delivery.Statuses
	// MaxInFlight bounds concurrent deliveries (default 64).
	MaxInFlight int
	// DeliveryTimeout bounds one delivery (default 10s). The HTTP deliverer
	// has its own; this one also bounds in-process handlers.
	DeliveryTimeout time.Duration
	// FetchMaxWait bounds how long a fetch waits for data (default 250ms),
	// and so how late a resumed tier partition is fetched.
	FetchMaxWait time.Duration
	// CreateSource, when positive, creates a missing source topic with that
	// many partitions (the embedded broker); otherwise a missing source is
	// an error.
	CreateSource int32
	// ShutdownGrace bounds how long in-flight deliveries may finish after
	// Run's context is cancelled (default DeliveryTimeout); past it they
	// are abandoned, the transaction is aborted and the records are
	// delivered again after a restart.
	ShutdownGrace time.Duration
	// Logger receives state changes; nil uses slog.Default().
	Logger *slog.Logger

	// beforeEnd, set by tests, runs after a batch's moves are flushed and
	// before its transaction ends.
	beforeEnd func()
}

// Engine runs one source topic. Create it with New, run it with Run.
type Engine struct {
	opts   Options
	log    *slog.Logger
	stats  Stats
	topics *retrytopics.Topics

	sess *kgo.GroupTransactSession
	adm  *kadm.Client

	mu     sync.Mutex
	timers map[tp]*time.Timer

	warned sync.Map // warn-once keys

	// rebalanced is set by a revoke or loss of partitions. The transact
	// session then aborts its next End, so after a rebalance the engine
	// ends an empty transaction before delivering anything (see Run).
	rebalanced atomic.Bool
}

type tp struct {
	topic     string
	partition int32
}

// New validates opts, checks or creates the tier and DLQ topics
// (retrytopics.Ensure) and builds the transactional group client. It returns
// retrytopics.ErrPartitionMismatch or retrytopics.ErrNoSource (wrapped) when
// the topics are wrong, and any broker error.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if len(opts.Brokers) == 0 || opts.Plan.Source == "" || opts.Group == "" || opts.Deliverer == nil {
		return nil, errors.New("engine: Brokers, Plan.Source, Group and Deliverer are required")
	}
	if opts.MaxInFlight < 1 {
		opts.MaxInFlight = 64
	}
	if opts.DeliveryTimeout <= 0 {
		opts.DeliveryTimeout = 10 * time.Second
	}
	if opts.FetchMaxWait <= 0 {
		opts.FetchMaxWait = 250 * time.Millisecond
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = opts.DeliveryTimeout
	}
	if opts.Statuses == nil {
		opts.Statuses = &delivery.DefaultStatuses
	}
	if opts.TransactionalID == "" {
		host, _ := os.Hostname()
		opts.TransactionalID = "kretry-" + host + "-" + opts.Group
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("topic", opts.Plan.Source, "group", opts.Group)

	e := &Engine{opts: opts, log: log, timers: make(map[tp]*time.Timer)}
	e.stats.Retried = make([]atomic.Int64, len(opts.Plan.Tiers))

	admCl, err := kgo.NewClient(append(slices.Clone(opts.ClientOpts), kgo.SeedBrokers(opts.Brokers...))...)
	if err != nil {
		return nil, fmt.Errorf("engine: admin client: %w", err)
	}
	e.adm = kadm.NewClient(admCl)
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e.topics, err = retrytopics.Ensure(ectx, e.adm, &opts.Plan, opts.CreateSource)
	if err != nil {
		e.adm.Close()
		return nil, err
	}
	maxBytes := 0
	for _, n := range e.topics.MaxBytes {
		maxBytes = max(maxBytes, n)
	}

	consume := []string{opts.Plan.Source}
	for _, t := range opts.Plan.Tiers {
		consume = append(consume, t.Topic)
	}
	copts := append(slices.Clone(opts.ClientOpts),
		kgo.SeedBrokers(opts.Brokers...),
		kgo.ConsumerGroup(opts.Group),
		kgo.ConsumeTopics(consume...),
		kgo.TransactionalID(opts.TransactionalID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchMaxWait(opts.FetchMaxWait),
		kgo.ProducerBatchMaxBytes(int32(min(maxBytes, 1<<30))),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			log.Info("partitions assigned", "partitions", m)
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			e.rebalanced.Store(true)
			e.stats.Revoked.Add(int64(countPartitions(m)))
			if len(m) > 0 {
				log.Info("partitions revoked", "partitions", m)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			e.rebalanced.Store(true)
			e.stats.Revoked.Add(int64(countPartitions(m)))
			log.Warn("partitions lost (session expired?)", "partitions", m)
		}),
	)
	copts = append(copts, opts.GroupOpts...)
	e.sess, err = kgo.NewGroupTransactSession(copts...)
	if err != nil {
		e.adm.Close()
		return nil, fmt.Errorf("engine: group client: %w", err)
	}
	return e, nil
}

// Stats returns the engine's live counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Topics returns the stage topics as found or created by New.
func (e *Engine) Topics() *retrytopics.Topics { return e.topics }

// Run consumes until ctx is cancelled or a fatal error occurs. On
// cancellation it lets in-flight deliveries finish (up to ShutdownGrace),
// commits what finished, leaves the group and closes the clients; it then
// returns nil. A fatal client error is returned.
func (e *Engine) Run(ctx context.Context) error {
	defer e.close()
	// hard is cancelled ShutdownGrace after ctx: in-flight deliveries are
	// abandoned then, and their batch aborted.
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(e.opts.ShutdownGrace, hardCancel)
		context.AfterFunc(hard, func() { t.Stop() })
	})
	defer stop()

	e.log.Info("consuming", "tiers", len(e.opts.Plan.Tiers), "dlq", e.opts.Plan.DLQ, "partitions", e.topics.Partitions)
	for {
		fetches := e.sess.PollRecords(ctx, 4*e.opts.MaxInFlight)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			e.sess.AllowRebalance()
			return nil
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			e.warnOnce("fetch:"+t+":"+err.Error(), "fetch error", "fetch_topic", t, "partition", p, "err", err)
		})
		recs := fetches.Records()
		if len(recs) == 0 {
			e.sess.AllowRebalance()
			continue
		}
		if e.rebalanced.Swap(false) {
			// The session aborts the first End after a revoke, which would
			// deliver this batch twice. End an empty transaction instead,
			// which rewinds to the committed offsets, and poll again.
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_, err := e.sess.End(ectx, kgo.TryAbort)
			cancel()
			e.sess.AllowRebalance()
			if err != nil {
				e.log.Warn("resetting after a rebalance", "err", err)
			}
			continue
		}
		if err := e.batch(ctx, hard, recs); err != nil {
			e.sess.AllowRebalance()
			return err
		}
		e.sess.AllowRebalance()
	}
}

func (e *Engine) close() {
	e.mu.Lock()
	for _, t := range e.timers {
		t.Stop()
	}
	e.mu.Unlock()
	// Close leaves the group; a transaction is never open here.
	e.sess.Close()
	e.adm.Close()
	e.log.Info("stopped")
}

// item is one record of a batch on its way through delivery.
type item struct {
	rec    *kgo.Record
	stage  int
	origin retrytopics.Origin
	route  retrytopics.Route
	fail   retrytopics.Failure
}

// rewind is a tier partition whose head is not yet due.
type rewind struct {
	offset kgo.EpochOffset
	due    time.Time
}

// batch delivers one poll's records and ends its transaction.
func (e *Engine) batch(ctx, hard context.Context, recs []*kgo.Record) error {
	now := time.Now()
	var items []*item
	rewinds := map[tp]rewind{}
	for _, r := range recs {
		k := tp{r.Topic, r.Partition}
		if _, stopped := rewinds[k]; stopped {
			continue // behind a record that is not yet due
		}
		stage := e.opts.Plan.Stage(r.Topic)
		o, err := retrytopics.ReadOrigin(r, stage == 0, int64(stage))
		if err != nil {
			e.warnOnce("origin:"+r.Topic, "record on a retry tier without readable kretry headers; delivering it now", "record_topic", r.Topic, "err", err)
		}
		if stage > 0 && o.Due.After(now) {
			rewinds[k] = rewind{kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}, o.Due}
			continue
		}
		items = append(items, &item{rec: r, stage: stage, origin: o})
	}

	e.deliverAll(hard, items)

	if hard.Err() != nil {
		// Shutdown grace ran out: abandon this batch, nothing moves or commits.
		e.log.Warn("shutdown grace elapsed with deliveries in flight; aborting their batch, they will be delivered again after restart", "records", len(items))
		return e.end(kgo.TryAbort, nil, nil)
	}
	return e.end(kgo.TryCommit, items, rewinds)
}

// end writes the moves of items and commits the batch, in one transaction.
func (e *Engine) end(try kgo.TransactionEndTry, items []*item, rewinds map[tp]rewind) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.sess.Begin(); err != nil {
		return fmt.Errorf("engine: begin transaction: %w", err)
	}
	var (
		produceErr error
		errMu      sync.Mutex
	)
	for _, it := range items {
		if it.route.Action == retrytopics.Done {
			continue
		}
		m := retrytopics.Move{
			Origin:   it.origin,
			Key:      it.rec.Key,
			Value:    it.rec.Value,
			Topic:    it.route.Topic,
			Failure:  it.fail,
			Group:    e.opts.Group,
			Version:  Version,
			MaxBytes: e.topics.MaxBytes[it.route.Topic],
		}
		if it.route.Action == retrytopics.Retry {
			m.Due = retrytopics.DueTime(it.fail.At, it.route.Delay)
		}
		e.sess.Produce(ctx, m.Record(), func(r *kgo.Record, err error) {
			if err != nil {
				errMu.Lock()
				produceErr = errors.Join(produceErr, fmt.Errorf("moving %s to %s: %w", it.origin.ID(), r.Topic, err))
				errMu.Unlock()
			}
		})
	}
	if err := e.sess.Client().Flush(ctx); err != nil {
		produceErr = errors.Join(produceErr, err)
	}
	if produceErr != nil {
		e.log.Error("a move failed; aborting the batch, it will be delivered again", "err", produceErr)
		try = kgo.TryAbort
	}
	if len(rewinds) > 0 && try == kgo.TryCommit {
		pause := map[string][]int32{}
		set := map[string]map[int32]kgo.EpochOffset{}
		for k, rw := range rewinds {
			pause[k.topic] = append(pause[k.topic], k.partition)
			if set[k.topic] == nil {
				set[k.topic] = map[int32]kgo.EpochOffset{}
			}
			set[k.topic][k.partition] = rw.offset
		}
		// Pause first so the rewound position is not fetched again at
		// once; then rewind, so the commit below stops at the record
		// that is not yet due.
		e.sess.Client().PauseFetchPartitions(pause)
		e.sess.Client().SetOffsets(set)
		for k, rw := range rewinds {
			e.resumeAt(k, rw.due)
		}
	}
	if e.opts.beforeEnd != nil {
		e.opts.beforeEnd()
	}
	committed, err := e.sess.End(ctx, try)
	if err != nil {
		// End already rewound to the last commit; the batch is delivered
		// again. Only a fatal producer state stops the engine.
		e.log.Warn("transaction did not commit; the batch will be delivered again", "err", err)
		e.stats.Aborted.Add(1)
		return nil
	}
	if !committed {
		if try == kgo.TryCommit {
			e.log.Info("transaction aborted by a rebalance; the batch will be delivered again")
		}
		e.stats.Aborted.Add(1)
		return nil
	}
	e.stats.Batches.Add(1)
	for _, it := range items {
		switch it.route.Action {
		case retrytopics.Retry:
			e.stats.Retried[it.route.Stage-1].Add(1)
		case retrytopics.DeadLetter:
			if it.route.Class == delivery.ClassExhausted {
				e.stats.Exhausted.Add(1)
			} else {
				e.stats.Permanent.Add(1)
			}
		}
	}
	return nil
}

// resumeAt resumes k's fetching at due. The due check on every fetched
// record is what guarantees the delay; the timer only ends the pause, so a
// revoke and re-assign in between cannot make a record early.
func (e *Engine) resumeAt(k tp, due time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t, ok := e.timers[k]; ok {
		t.Stop()
	}
	e.timers[k] = time.AfterFunc(time.Until(due), func() {
		e.sess.Client().ResumeFetchPartitions(map[string][]int32{k.topic: {k.partition}})
		e.mu.Lock()
		delete(e.timers, k)
		e.mu.Unlock()
	})
}

// deliverAll delivers items, at most MaxInFlight at a time, the items of one
// key of one partition in order, and sets each item's route.
func (e *Engine) deliverAll(ctx context.Context, items []*item) {
	type laneKey struct {
		tp
		key string
	}
	var lanes [][]*item
	index := map[laneKey]int{}
	for _, it := range items {
		if it.rec.Key == nil {
			lanes = append(lanes, []*item{it}) // a null key orders nothing
			continue
		}
		k := laneKey{tp{it.rec.Topic, it.rec.Partition}, string(it.rec.Key)}
		i, ok := index[k]
		if !ok {
			i = len(lanes)
			index[k] = i
			lanes = append(lanes, nil)
		}
		lanes[i] = append(lanes[i], it)
	}
	sem := make(chan struct{}, e.opts.MaxInFlight)
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Go(func() {
			for _, it := range lane {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					return
				}
				e.deliver(ctx, it)
				<-sem
			}
		})
	}
	wg.Wait()
}

func (e *Engine) deliver(ctx context.Context, it *item) {
	o := &it.origin
	m := &delivery.Message{
		ID:        o.ID(),
		Topic:     o.Topic,
		Partition: o.Partition,
		Offset:    o.Offset,
		Timestamp: o.Timestamp,
		Key:       it.rec.Key,
		Value:     it.rec.Value,
		Headers:   o.Headers,
		Attempt:   int(min(o.Attempts+1, 1<<31-1)),
	}
	dctx, cancel := context.WithTimeout(ctx, e.opts.DeliveryTimeout)
	e.stats.InFlight.Add(1)
	err := e.opts.Deliverer.Deliver(dctx, m)
	e.stats.InFlight.Add(-1)
	cancel()
	if err == nil {
		e.stats.Delivered.Add(1)
		it.route = retrytopics.Route{Action: retrytopics.Done}
		return
	}
	if ctx.Err() != nil {
		return // abandoned at shutdown; the batch aborts
	}
	e.stats.Failed.Add(1)
	v := delivery.Classify(err, *e.opts.Statuses)
	if v.Unlisted {
		key := fmt.Sprintf("unlisted:%d", v.Status)
		if v.Status == 0 {
			key = "unlisted:" + firstWords(v.Message)
		}
		e.warnOnce(key, "delivery failed with an unlisted status or error; treating it as transient", "status", v.Status, "err", v.Message)
	}
	it.route = e.opts.Plan.Route(it.stage, &v, retrytopics.Jitter())
	it.fail = retrytopics.Failure{Class: it.route.Class, Status: v.Status, Message: v.Message, At: time.Now()}
	if it.route.Class == delivery.ClassExhausted {
		it.fail.Message = "retry tiers exhausted; last error: " + v.Message
	}
	e.log.Debug("delivery failed", "id", m.ID, "attempt", m.Attempt, "class", it.route.Class, "status", v.Status, "to", it.route.Topic)
}

func firstWords(s string) string {
	if i := strings.IndexAny(s, ":\n"); i > 0 {
		return s[:i]
	}
	return s
}

// warnOnce logs msg at warn level the first time key is seen.
func (e *Engine) warnOnce(key, msg string, args ...any) {
	if _, seen := e.warned.LoadOrStore(key, true); !seen {
		e.log.Warn(msg, args...)
	}
}

// Stats are an engine's live counters (records).
type Stats struct {
	// Delivered counts deliveries the application acknowledged (2xx),
	// repeated deliveries of one record included.
	Delivered atomic.Int64
	// Failed counts deliveries that failed.
	Failed atomic.Int64
	// Retried[i] counts records moved to tier i+1.
	Retried []atomic.Int64
	// Permanent and Exhausted count records moved to the DLQ by class.
	Permanent atomic.Int64
	Exhausted atomic.Int64
	// InFlight is the number of deliveries under way.
	InFlight atomic.Int64
	// Batches counts committed transactions; Aborted those that did not
	// commit (their records are delivered again).
	Batches atomic.Int64
	Aborted atomic.Int64
	// Revoked counts partitions revoked or lost in rebalances.
	Revoked atomic.Int64
}

func countPartitions(m map[string][]int32) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}
