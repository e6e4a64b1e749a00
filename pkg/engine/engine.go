// Package engine runs kretry's consume → deliver → move loop for one source
// topic, its retry tiers and its parking topic, in-process. It is what
// `kretry run` runs, and Go programs can run it with a delivery.HandlerFunc
// instead of HTTP (see Example in example_test.go):
//
//	e, err := engine.New(ctx, engine.Options{
//		Brokers:   []string{"127.0.0.1:9092"},
//		Plan:      plan,            // retrytopics.Plan: source, tiers, DLQ
//		Group:     "orders-kretry",
//		Deliverer: delivery.HandlerFunc(handle), // nil error: done; delivery.Permanent(err): DLQ; other errors: retry
//	})
//	if err != nil { … }
//	err = e.Run(ctx) // until ctx is cancelled, then a clean shutdown
//
// # How records move
//
// One consumer group reads the source, every tier and (with ordering key or
// partition) the parking topic. Partition p of all of them belongs to one
// member at a time: the group uses the range assignor, which gives partition
// p of every topic with the same partition count to the same member (the
// co-partitioning Kafka Streams relies on), and retrytopics.Ensure refuses
// topics whose counts differ.
//
// Records are delivered as they arrive, at most MaxInFlight at a time, the
// records of one key of one partition strictly one after another and
// records of other keys concurrently. A record of a tier is delivered once
// its kretry-due-time has come; until then its partition is paused (a timer
// wakes the loop; no busy loop). Retries and released parked records never
// take more than RetryShare of the in-flight slots, so first attempts keep
// flowing while many records fail.
//
// Every CommitInterval one Kafka transaction carries the moves (to a tier,
// the parking topic or the DLQ) of the records that finished and the offset
// commit up to, per partition, the first record not yet finished (DESIGN.md
// invariant 2): a record's move is never committed without its offset, nor
// its offset without its move. A failed or aborted transaction, and every
// rebalance, drop the in-memory state after in-flight deliveries end; the
// records after the last commit are then read and delivered again, so
// delivery is at least once (ce-id is the idempotency key) and moves are
// exactly once.
//
// # Ordering
//
// With Ordering "key", a record whose delivery fails transiently blocks its
// key: later records of the key are moved to the parking topic instead of
// being delivered, and are delivered in order once the blocked record
// succeeds (or is dead-lettered, per OnDeadLetter). The parking partition
// is also the changelog of the blocked keys (see parking.go): on assignment
// the engine replays it up to a barrier record it writes itself before
// delivering anything of that partition, so nothing needed for correctness
// lives only in memory. "partition" blocks the whole partition the same way;
// "none" never parks.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// Options configures one Engine. Brokers, Plan, Group and Deliverer are
// required.
type Options struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// ClientOpts are extra franz-go options for every client of the engine
	// (TLS, SASL, dialer, logger …).
	ClientOpts []kgo.Opt
	// GroupOpts are extra franz-go options for the group client only
	// (session and rebalance timeouts). They must not set the partition
	// callbacks or the balancer, which the engine needs for itself.
	GroupOpts []kgo.Opt
	// Plan is the source topic, its tiers and its DLQ.
	Plan retrytopics.Plan
	// Group is the consumer group for the source, tiers and parking topic.
	Group string
	// TransactionalID of the engine's producer. Every instance of one group
	// needs its own, stable across restarts so that a restarted instance
	// aborts the transaction its predecessor left open. Default
	// flow.TransactionalID("kretry", <hostname>, Group).
	TransactionalID string
	// InstanceID, when set, is the consumer's group.instance.id (KIP-345
	// static membership): an instance restarted under the same id gets its
	// partitions back at once, without waiting for the session timeout or
	// a rebalance. It must be unique among the live members of the group
	// and stable across restarts; a second live member with the same id
	// fences the first, whose Run then returns a *FencedError. On a clean
	// stop the engine leaves the group explicitly (a static member does not
	// leave when its client closes), so its partitions move at once. Empty
	// means dynamic membership.
	InstanceID string
	// Deliverer hands records to the application.
	Deliverer delivery.Deliverer
	// Statuses classify HTTP statuses; default delivery.DefaultStatuses.
	Statuses *delivery.Statuses
	// MaxInFlight bounds concurrent deliveries (default
	// flow.DefaultMaxInFlight, 64).
	MaxInFlight int
	// RetryShare is the share of MaxInFlight that retries and released
	// parked records may use, in (0, 1] (default 0.75): the rest stays
	// free for first attempts.
	RetryShare float64
	// DeliveryTimeout bounds one delivery (default
	// flow.DefaultDeliveryTimeout, 10s). The HTTP deliverer
	// has its own; this one also bounds in-process handlers.
	DeliveryTimeout time.Duration
	// FetchMaxWait bounds how long a fetch waits for data (default
	// flow.DefaultFetchMaxWait, 50ms),
	// and so how late a resumed partition is fetched (franz-go does not cut
	// short a fetch in flight when a partition resumes).
	FetchMaxWait time.Duration
	// CommitInterval is how often finished records are committed (default
	// 100ms). Shorter: less redelivery after a crash; longer: fewer
	// transactions.
	CommitInterval time.Duration
	// MaxPending bounds the records held per partition between fetch and
	// commit (default the larger of 4096 and 32 × MaxInFlight); past it the
	// partition's fetching pauses, and past half of it a commit is due at
	// once.
	MaxPending int
	// Ordering is flow.OrderingKey (default, as in the YAML config),
	// flow.OrderingPartition or flow.OrderingNone.
	Ordering flow.Ordering
	// ParkingTopic is the parking topic of flow.OrderingKey and
	// flow.OrderingPartition (default retrytopics.ParkingTopic(Plan.Source),
	// <source>.parking).
	ParkingTopic string
	// OnDeadLetter is the policy for records parked behind a dead-lettered
	// record (default flow.OnDeadLetterRelease).
	OnDeadLetter flow.OnDeadLetter
	// MaxParked bounds the parked records per partition (default
	// flow.DefaultMaxParked, 10000).
	// At the bound the source partition pauses (back-pressure); nothing is
	// dropped.
	MaxParked int
	// CreateSource, when positive, creates a missing source topic with that
	// many partitions (the embedded broker); otherwise a missing source is
	// an error.
	CreateSource int32
	// ShutdownGrace bounds how long in-flight deliveries may finish after
	// Run's context is cancelled (default DeliveryTimeout); past it they
	// are abandoned uncommitted and delivered again after a restart.
	ShutdownGrace time.Duration
	// Logger receives state changes; nil uses slog.Default().
	Logger *slog.Logger
	// Observer receives events for metrics; nil observes nothing.
	Observer Observer

	// txnTimeout, set by tests, replaces transactionTimeout.
	txnTimeout time.Duration
	// authLimit, set by tests, replaces authFailureLimit.
	authLimit time.Duration
	// beforeEnd, set by tests, runs after a transaction's moves are
	// flushed and before it ends.
	beforeEnd func()
}

// Engine runs one source topic. Create it with New, run it with Run.
type Engine struct {
	opts   Options
	plan   retrytopics.Plan
	log    *slog.Logger
	stats  Stats
	topics *retrytopics.Topics
	obs    Observer

	sess *kgo.GroupTransactSession
	adm  *kadm.Client
	// admCl is adm's client, for requests kadm has no builder for.
	admCl *kgo.Client
	// copts build sess, again after a reset (see resetSession).
	copts []kgo.Opt
	// authFirst and authLast are when the brokers' refusals of our
	// credentials began and were last seen (see authFailing).
	authFirst, authLast time.Time
	// lastReset is when the session was last rebuilt; resetPause the pause
	// before the last rebuild (see resetSession).
	lastReset  time.Time
	resetPause time.Duration
	// cl is the group client; set by the first rebalance callback (which
	// may run before NewGroupTransactSession returns) or after it.
	cl atomic.Pointer[kgo.Client]

	// mu guards the shards and everything reachable from them. The loop
	// holds it while it works; rebalance callbacks hold it while they drop
	// state. It is never held across a call into the transact session.
	mu         sync.Mutex
	shards     map[int32]*shard
	gen        uint64
	ready      []*lane // lanes whose next entry is a first attempt
	retryReady []*lane // lanes whose next entry is a retry or parked record
	inflight   int
	retrying   int
	stopping   bool
	lastCommit time.Time
	// lastEndErr is the error of the last End (nil when it ended well).
	lastEndErr error
	// leave: Run stopped cleanly, so a static member leaves the group.
	leave bool
	// settled counts entries settled since the last transaction; a commit
	// is due early when it reaches MaxPending/2.
	settled int
	// barrierDue: newly assigned partitions wait for their barrier; write it
	// at once rather than at the next CommitInterval.
	barrierDue bool
	// loose are op records not tied to a fetched record, written by the
	// next transaction; looseAfter runs once it commits.
	loose      []move
	looseAfter []func()

	deliveries  sync.WaitGroup
	needAbort   atomic.Bool // a rebalance happened: end an empty transaction first
	hard        context.Context
	wakeMu      sync.Mutex
	pollCancel  context.CancelFunc
	woken       bool
	warned      sync.Map
	instanceTag string

	// joined is closed by the first rebalance callback that assigns.
	joined     chan struct{}
	joinedOnce sync.Once
}

// setDefaults fills the zero fields of o with their documented defaults
// (the YAML config's, from package flow) and rejects an unknown Ordering or
// OnDeadLetter.
func (o *Options) setDefaults() error {
	if o.MaxInFlight < 1 {
		o.MaxInFlight = flow.DefaultMaxInFlight
	}
	if o.RetryShare <= 0 || o.RetryShare > 1 {
		o.RetryShare = 0.75
	}
	if o.DeliveryTimeout <= 0 {
		o.DeliveryTimeout = flow.DefaultDeliveryTimeout
	}
	if o.FetchMaxWait <= 0 {
		o.FetchMaxWait = flow.DefaultFetchMaxWait
	}
	if o.CommitInterval <= 0 {
		o.CommitInterval = 100 * time.Millisecond
	}
	if o.MaxPending <= 0 {
		o.MaxPending = max(4096, 32*o.MaxInFlight)
	}
	if o.MaxParked <= 0 {
		o.MaxParked = flow.DefaultMaxParked
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = o.DeliveryTimeout
	}
	if o.Statuses == nil {
		o.Statuses = &delivery.DefaultStatuses
	}
	if o.txnTimeout <= 0 {
		o.txnTimeout = transactionTimeout
	}
	if o.authLimit <= 0 {
		o.authLimit = authFailureLimit
	}
	if o.Ordering == "" {
		o.Ordering = flow.DefaultOrdering
	}
	if !slices.Contains(flow.Orderings, o.Ordering) {
		return fmt.Errorf("engine: unknown Ordering %q: use one of %q", o.Ordering, flow.Orderings)
	}
	if o.Ordering.Parks() && o.ParkingTopic == "" {
		o.ParkingTopic = retrytopics.ParkingTopic(o.Plan.Source)
	}
	if o.OnDeadLetter == "" {
		o.OnDeadLetter = flow.DefaultOnDeadLetter
	}
	if !slices.Contains(flow.OnDeadLetters, o.OnDeadLetter) {
		return fmt.Errorf("engine: unknown OnDeadLetter policy %q: use one of %q", o.OnDeadLetter, flow.OnDeadLetters)
	}
	if o.TransactionalID == "" {
		host, _ := os.Hostname()
		o.TransactionalID = flow.TransactionalID(flow.DefaultTransactionalIDPrefix, host, o.Group)
	}
	return nil
}

// New validates opts, checks or creates the tier, parking and DLQ topics
// (retrytopics.Ensure) and builds the transactional group client. It returns
// retrytopics.ErrPartitionMismatch or retrytopics.ErrNoSource (wrapped) when
// the topics are wrong, and any broker error.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if len(opts.Brokers) == 0 || opts.Plan.Source == "" || opts.Group == "" || opts.Deliverer == nil {
		return nil, errors.New("engine: Brokers, Plan.Source, Group and Deliverer are required")
	}
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("topic", opts.Plan.Source, "group", opts.Group)

	e := &Engine{
		opts:        opts,
		plan:        opts.Plan,
		log:         log,
		obs:         opts.Observer,
		shards:      map[int32]*shard{},
		instanceTag: fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()),
		joined:      make(chan struct{}),
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	e.stats.Retried = make([]atomic.Int64, len(opts.Plan.Tiers))

	admCl, err := kgo.NewClient(append(slices.Clone(opts.ClientOpts), kgo.SeedBrokers(opts.Brokers...))...)
	if err != nil {
		return nil, fmt.Errorf("engine: admin client: %w", err)
	}
	e.admCl = admCl
	e.adm = kadm.NewClient(admCl)
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var extra []string
	if e.parking() {
		extra = append(extra, opts.ParkingTopic)
	}
	e.topics, err = e.ensureTopics(ectx, extra)
	if err != nil {
		e.adm.Close()
		return nil, err
	}
	e.warnOrphans(ectx)
	maxBytes := 0
	for _, n := range e.topics.MaxBytes {
		maxBytes = max(maxBytes, n)
	}

	consume := []string{opts.Plan.Source}
	for _, t := range opts.Plan.Tiers {
		consume = append(consume, t.Topic)
	}
	if e.parking() {
		consume = append(consume, opts.ParkingTopic)
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
		// Transactions last about one CommitInterval. A short timeout bounds
		// how long a crashed instance's open transaction holds back
		// read_committed readers when no successor with the same
		// transactional ID aborts it (franz-go's default is 40s).
		kgo.TransactionTimeout(opts.txnTimeout),
	)
	if opts.InstanceID != "" {
		copts = append(copts, kgo.InstanceID(opts.InstanceID))
	}
	copts = append(copts, opts.GroupOpts...)
	copts = append(copts,
		// Range gives partition p of every subscribed topic with the same
		// partition count to the same member: source, tiers and parking
		// are co-partitioned (DESIGN.md invariant 8).
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { e.cl.Store(cl); e.assigned(m) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { e.cl.Store(cl); e.revoked(m, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { e.cl.Store(cl); e.revoked(m, true) }),
	)
	e.copts = copts
	e.sess, err = kgo.NewGroupTransactSession(copts...)
	if err != nil {
		e.adm.Close()
		return nil, fmt.Errorf("engine: group client: %w", err)
	}
	e.cl.Store(e.sess.Client())
	return e, nil
}

func (e *Engine) parking() bool { return e.opts.Ordering.Parks() }

// Stats returns the engine's live counters.
func (e *Engine) Stats() *Stats { return &e.stats }

// Joined returns a channel closed once Run has joined the consumer group
// and received its first assignment. The assignment may be empty: with
// more instances than partitions some get none, and are still members
// (they take partitions over when another instance leaves). It is not
// reopened by later rebalances.
func (e *Engine) Joined() <-chan struct{} { return e.joined }

// Topics returns the stage topics as found or created by New.
func (e *Engine) Topics() *retrytopics.Topics { return e.topics }

// Run consumes until ctx is cancelled or a fatal error occurs. On
// cancellation it stops starting deliveries, lets in-flight ones finish (up
// to ShutdownGrace), commits what finished, leaves the group and closes the
// clients; it then returns nil. A fatal client error is returned.
func (e *Engine) Run(ctx context.Context) error {
	defer e.close()
	// hard is cancelled ShutdownGrace after ctx: in-flight deliveries are
	// abandoned then, uncommitted.
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	e.hard = hard
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(e.opts.ShutdownGrace, hardCancel)
		context.AfterFunc(hard, func() { t.Stop() })
		e.wake()
	})
	defer stop()

	e.log.Info("consuming", "tiers", len(e.plan.Tiers), "dlq", e.plan.DLQ, "ordering", e.opts.Ordering, "partitions", e.topics.Partitions)
	e.lastCommit = time.Now()
	for {
		if ctx.Err() != nil {
			err := e.shutdown()
			e.leave = !errors.Is(err, ErrFenced)
			if errors.Is(err, errSessionReset) {
				// The final transaction did not commit: its records are
				// delivered again by the partitions' next owner.
				e.log.Warn("the final transaction could not commit; its records will be delivered again", "err", err)
				return nil
			}
			return err
		}
		fetches := e.poll(ctx)
		if fetches.IsClientClosed() {
			return errors.New("engine: client closed")
		}
		if e.needAbort.Swap(false) {
			// A rebalance dropped our state; the session would abort the
			// next End anyway. End an empty transaction now, which rewinds
			// every partition to its committed offset, and start over.
			e.endEmpty()
			e.sess.AllowRebalance()
			continue
		}
		var fenced, authErr error
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				return
			}
			if isFenced(err) {
				fenced = err
				return
			}
			if credentialsRefused(err) {
				authErr = err
			}
			e.warnOnce("fetch:"+t+":"+err.Error(), "fetch error", "fetch_topic", t, "partition", p, "err", err)
		})
		if fenced != nil {
			e.sess.AllowRebalance()
			return e.fenced(fenced)
		}
		if err := e.authFailing(authErr, time.Now()); err != nil {
			e.sess.AllowRebalance()
			return err
		}

		e.mu.Lock()
		e.ingest(fetches.Records())
		e.dispatch(time.Now())
		var tx *txn
		if time.Since(e.lastCommit) >= e.opts.CommitInterval || e.settled >= e.opts.MaxPending/2 || e.barrierDue {
			e.barrierDue = false
			tx = e.prepare()
		}
		e.mu.Unlock()
		if tx != nil {
			if err := e.commit(tx, e.opts.txnTimeout); err != nil {
				e.sess.AllowRebalance()
				if errors.Is(err, errSessionReset) {
					if err = e.resetSession(ctx, err); err == nil {
						continue
					}
				}
				return err
			}
		}
		e.sess.AllowRebalance()
	}
}

// poll waits for records until the next commit or due time, or until a
// delivery result wakes it.
func (e *Engine) poll(ctx context.Context) kgo.Fetches {
	e.mu.Lock()
	wait := e.opts.CommitInterval
	if next, ok := e.nextDue(); ok {
		wait = min(wait, max(time.Until(next), time.Millisecond))
	}
	e.mu.Unlock()
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	e.wakeMu.Lock()
	if e.woken {
		cancel()
	}
	e.woken = false
	e.pollCancel = cancel
	e.wakeMu.Unlock()
	f := e.sess.PollRecords(pctx, 4*e.opts.MaxInFlight)
	e.wakeMu.Lock()
	e.pollCancel = nil
	e.wakeMu.Unlock()
	return f
}

// wake makes the current (or next) poll return at once.
func (e *Engine) wake() {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	if e.pollCancel != nil {
		e.pollCancel()
	} else {
		e.woken = true
	}
}

// endEmpty ends an empty transaction, resetting the session after a
// rebalance.
func (e *Engine) endEmpty() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.sess.End(ctx, kgo.TryAbort); err != nil {
		e.log.Warn("resetting the transaction session after a rebalance", "err", err)
	}
}

// shutdown stops dispatching, waits for in-flight deliveries (bounded by
// ShutdownGrace through e.hard), and commits what finished.
func (e *Engine) shutdown() error {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.waitDeliveries(e.opts.ShutdownGrace + time.Second)
	// An immediately cancelled poll holds off rebalances until
	// AllowRebalance, so the final commit is not cut by one.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.sess.PollRecords(cctx, 1)
	defer e.sess.AllowRebalance()
	if e.needAbort.Swap(false) {
		return nil // state was dropped by a rebalance: nothing to commit
	}
	e.mu.Lock()
	tx := e.prepare()
	e.mu.Unlock()
	if tx != nil {
		return e.commit(tx, shutdownCommitTimeout)
	}
	return nil
}

// Close releases an engine that New built and that will not be Run (Run
// closes its engine itself; do not call both): its clients close and its
// static member, which may have joined the group already, leaves it.
func (e *Engine) Close() {
	e.leave = true
	e.close()
}

func (e *Engine) close() {
	// Close leaves the group (a dynamic member); no transaction is open here.
	// It waits for a JoinGroup under way to finish, so the member id is
	// read after it: read before, it is "" for an engine stopped while
	// joining, whose static member would then stay in the group, hold its
	// partitions for the session timeout and stall the next rebalance.
	e.sess.Close()
	memberID, _ := e.sess.Client().GroupMetadata()
	if e.leave {
		e.leaveStatic(memberID)
	}
	e.adm.Close()
	e.log.Info("stopped")
}

// assigned creates the shards of newly assigned partitions. With parking,
// each new shard starts by replaying its parking partition (see
// parking.go); its source and tier partitions stay paused until then.
func (e *Engine) assigned(m map[string][]int32) {
	defer e.joinedOnce.Do(func() { close(e.joined) })
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log.Info("partitions assigned", "partitions", m)
	for _, p := range m[e.plan.Source] {
		e.shardFor(p)
	}
	if e.parking() && len(m[e.plan.Source]) > 0 {
		e.barrierDue = true
		e.wake()
	}
}

// revoked drops all state: the range assignor is eager, so a rebalance
// revokes every partition. In-flight deliveries are waited for, so that a
// record's old delivery cannot land after its new owner's next one.
func (e *Engine) revoked(m map[string][]int32, lost bool) {
	if countPartitions(m) == 0 {
		return
	}
	e.stats.Revoked.Add(int64(countPartitions(m)))
	if lost {
		e.log.Warn("partitions lost (session expired?)", "partitions", m)
	} else {
		e.log.Info("partitions revoked", "partitions", m)
	}
	e.mu.Lock()
	e.resetLocked()
	stopping := e.stopping
	e.mu.Unlock()
	e.needAbort.Store(true)
	if !stopping { // at shutdown they were waited for already
		e.waitDeliveries(e.opts.DeliveryTimeout + time.Second)
	}
}

// waitDeliveries waits for in-flight deliveries to end, at most d: a
// handler that ignores its context must not hang a rebalance or a shutdown.
// Past d the delivery is abandoned (its result is discarded) and a warning
// says that its record may reach the app again while it is still running.
func (e *Engine) waitDeliveries(d time.Duration) {
	done := make(chan struct{})
	go func() {
		e.deliveries.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		e.log.Warn("a delivery did not end within its timeout (the handler ignores its context?); abandoning it", "waited", d)
	}
}

// resetLocked drops every shard; results of deliveries still in flight are
// discarded when they arrive (their generation is stale).
func (e *Engine) resetLocked() {
	e.gen++
	var resume map[string][]int32
	for p, sh := range e.shards {
		for t, q := range sh.queues {
			if q.paused {
				if resume == nil {
					resume = map[string][]int32{}
				}
				resume[t] = append(resume[t], p)
			}
		}
		if !sh.restoring { // a restoring shard's parked records are counted when it finishes (finishRestore)
			e.stats.ParkedRecords.Add(-int64(sh.parkedCount()))
		}
		e.stats.BlockedKeys.Add(-int64(sh.blockedCount()))
	}
	if resume != nil {
		e.cl.Load().ResumeFetchPartitions(resume)
	}
	e.shards = map[int32]*shard{}
	e.ready, e.retryReady = nil, nil
	e.settled = 0
	e.loose, e.looseAfter = nil, nil
}

// warnOnce logs msg at warn level the first time key is seen.
func (e *Engine) warnOnce(key, msg string, args ...any) {
	if _, seen := e.warned.LoadOrStore(key, true); !seen {
		e.log.Warn(msg, args...)
	}
}

// Stats are an engine's live counters (records unless said otherwise).
type Stats struct {
	// Delivered counts deliveries the application acknowledged (2xx),
	// repeated deliveries of one record included.
	Delivered atomic.Int64
	// Failed counts deliveries that failed.
	Failed atomic.Int64
	// Retried[i] counts records moved to tier i+1 (committed).
	Retried []atomic.Int64
	// Permanent and Exhausted count records moved to the DLQ by class.
	Permanent atomic.Int64
	Exhausted atomic.Int64
	// Parked counts records moved to the parking topic.
	Parked atomic.Int64
	// InFlight is the number of deliveries under way.
	InFlight atomic.Int64
	// BlockedKeys and ParkedRecords are gauges: keys blocked and records
	// parked (or on their way to parking) on this instance now.
	BlockedKeys   atomic.Int64
	ParkedRecords atomic.Int64
	// Batches counts committed transactions; Aborted those that did not
	// commit (their records are delivered again).
	Batches atomic.Int64
	Aborted atomic.Int64
	// Revoked counts partitions revoked or lost in rebalances.
	Revoked atomic.Int64
	// Stuck counts records that could not be moved because they do not fit
	// their next topic's max.message.bytes (see the error log).
	Stuck atomic.Int64
}

func countPartitions(m map[string][]int32) int {
	n := 0
	for _, ps := range m {
		n += len(ps)
	}
	return n
}

type nopObserver struct{}

func (nopObserver) Delivered(DeliveryEvent) {}
func (nopObserver) Moved(MoveEvent)         {}
func (nopObserver) Committed(CommitEvent)   {}
