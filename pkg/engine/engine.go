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
// the parking topic or the DLQ) of the records that finished, wherever they
// stand in their partition, and the offset commit of, per partition, the
// first record not yet finished, with commit metadata listing which records
// past it are done (progress.go; DESIGN.md invariant 2): a record's move is
// never committed without the commit that marks it done, nor marked done
// without its move. A transaction is due sooner once MaxPending/2 records
// of a partition finished. A failed or aborted transaction, and every
// rebalance, drop the in-memory state after in-flight deliveries end; the
// records after the last commit that it does not mark done are then read
// and delivered again, so delivery is at least once (ce-id is the
// idempotency key) and moves are exactly once.
//
// # Ordering
//
// With Ordering "key", a record whose delivery fails transiently blocks its
// key: later records of the key are moved to the parking topic instead of
// being delivered, and are delivered in order once the blocked record
// succeeds (or is dead-lettered, per OnDeadLetter). The parking partition
// is also the changelog of the blocked keys (see restore.go): on assignment
// the engine replays it up to a barrier record it writes itself before
// delivering anything of that partition, so nothing needed for correctness
// lives only in memory. "partition" blocks the whole partition the same way;
// "none" never parks.
//
// # One record's path, by file
//
// A fetched record is taken into its partition's queue and its key's lane
// (shard.go: ingest, accept; record.go keeps what an entry holds of it
// small, as a blocked key or a parked record may wait for minutes); a tier
// record waits for its due time in the tier's retrytopics.Schedule.
// dispatch.go decides which deliveries may start now, deliver.go runs
// them; apply.go routes the result (retrytopics.Plan.Route: done, next
// tier, DLQ) and builds the move; parking.go keeps the key's parking state
// (a parking.Key state machine) and writes its changelog ops; batch.go
// collects the moves and commits of the next transaction (progress.go
// decides, per partition, which records go and the commit that marks them
// done), txn.go writes and commits them in one. run.go is the loop,
// pauses.go the paused partitions, rebalance.go the assignment changes.
//
// # Concurrency
//
// The state and every decision on it are the core's (core.go): it takes
// events (records fetched, a delivery's result, the loop's turn, a
// transaction committed or dropped, an assignment) and returns effects
// (deliveries to run, partitions to pause or resume, the next
// transaction, a wake of the loop); it has no lock of its own, makes no Kafka call
// and starts no goroutine, so tests drive it with no broker. Engine is the
// shell around it, and each part of the shell calls into the core under
// one mutex (Engine.mu), which makes it the core's one owner while it
// holds it. One goroutine, the loop (Run), polls, ingests, dispatches,
// tells the client which partitions to pause or resume and runs each
// transaction. Deliveries run on goroutines of their own, at most
// MaxInFlight at once: one that ends applies its result and starts the
// next deliveries at once, running the first of them itself, so that a
// freed slot waits for no loop turn and a backlog does not start a
// goroutine per record. The rebalance callbacks run on franz-go's
// goroutine and drop the state. No Kafka client call is made under the
// mutex: pauses and resumes are applied by the loop alone (applyPauses, so
// they reach the client in the order decided), and a transaction is
// produced and ended with the lock released, its after-commit bookkeeping
// taken under it again. A reset (rebalance, failed transaction) bumps a
// generation: the result of a delivery started before it is discarded and
// its record is delivered again. Deliveries that start within 10ms share
// one deadline context, and one timer per such cohort abandons those of
// its handlers that ignore the context (deadline.go).
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/retrytopics"
)

// Engine runs one source topic. Create it with New, run it with Run.
//
// It is the shell around the state core (core.go): the clients, the poll
// loop, the delivery goroutines, the transactions and the rebalance
// callbacks. Each of them calls into the core under mu.
type Engine struct {
	core

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
	// trouble records the group client's broker trouble, lastPardon when
	// a takeover signal was last taken for our own orphaned member (see
	// pardonTakeover).
	trouble    brokerTrouble
	lastPardon time.Time
	// cl is the group client; set by the first rebalance callback (which
	// may run before NewGroupTransactSession returns) or after it.
	cl atomic.Pointer[kgo.Client]

	// mu makes whoever holds it the core's one owner: the loop while it
	// works, a delivery goroutine while it applies its result, a rebalance
	// callback while it drops state. It is never held across a call into
	// the transact session. Release it with unlock, which carries out the
	// core's wake.
	mu sync.Mutex
	// lastEndErr is the error of the last End (nil when it ended well);
	// lastEnd when it returned.
	lastEndErr error
	lastEnd    time.Time
	// leave: Run stopped cleanly, so a static member leaves the group.
	leave bool

	deliveries sync.WaitGroup
	needAbort  atomic.Bool // a rebalance happened: end an empty transaction first
	deadlines  *deadlines  // the deliveries' contexts; e.mu guards it
	wakeMu     sync.Mutex
	pollCancel context.CancelFunc
	woken      bool

	// joined is closed by the first rebalance callback that assigns.
	joined     chan struct{}
	joinedOnce sync.Once
}

// unlock releases e.mu and wakes the loop if the core asked for it.
func (e *Engine) unlock() {
	w := e.takeWake()
	e.mu.Unlock()
	if w {
		e.wake()
	}
}

// New validates opts, checks or creates the tier, parking and DLQ topics
// (retrytopics.Ensure) and builds the transactional group client. It returns
// retrytopics.ErrPartitionMismatch or retrytopics.ErrNoSource (wrapped) when
// the topics are wrong. While no broker answers it logs one WARN and tries
// again every 500ms until ctx ends, then returns the last broker error: a
// broker that is down at the start is a reason to wait, so give ctx a
// deadline to bound the start.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if err := opts.check(); err != nil {
		return nil, err
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
		core: core{
			opts:    opts,
			plan:    opts.Plan,
			log:     log,
			obs:     opts.Observer,
			shards:  map[int32]*shard{},
			commits: groupCommits{},
			// instanceTag makes the barrier nonces unique (shard.go).
			instanceTag: fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano()),
		},
		joined: make(chan struct{}),
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
	e.copts = e.groupClientOpts()
	e.sess, err = kgo.NewGroupTransactSession(e.copts...)
	if err != nil {
		e.adm.Close()
		return nil, fmt.Errorf("engine: group client: %w", err)
	}
	e.cl.Store(e.sess.Client())
	return e, nil
}

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

// groupClientOpts are the options of the transactional group client: it
// consumes the source, the tiers and the parking topic, reads committed,
// and writes the moves.
func (e *Engine) groupClientOpts() []kgo.Opt {
	maxBytes := 0
	for _, n := range e.topics.MaxBytes {
		maxBytes = max(maxBytes, n)
	}

	consume := []string{e.opts.Plan.Source}
	for _, t := range e.opts.Plan.Tiers {
		consume = append(consume, t.Topic)
	}
	if e.parking() {
		consume = append(consume, e.opts.ParkingTopic)
	}
	copts := append(slices.Clone(e.opts.ClientOpts),
		kgo.SeedBrokers(e.opts.Brokers...),
		kgo.ConsumerGroup(e.opts.Group),
		kgo.ConsumeTopics(consume...),
		kgo.TransactionalID(e.opts.TransactionalID),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.BlockRebalanceOnPoll(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchMaxWait(e.opts.FetchMaxWait),
		kgo.ProducerBatchMaxBytes(int32(min(maxBytes, 1<<30))),
		// Transactions last about one CommitInterval. A short timeout bounds
		// how long a crashed instance's open transaction holds back
		// read_committed readers when no successor with the same
		// transactional ID aborts it (franz-go's default is 40s).
		kgo.TransactionTimeout(e.opts.txnTimeout),
		kgo.WithHooks(&e.trouble),
	)
	if e.opts.InstanceID != "" {
		copts = append(copts, kgo.InstanceID(e.opts.InstanceID))
	}
	copts = append(copts, e.opts.GroupOpts...)
	copts = append(copts,
		// Range gives partition p of every subscribed topic with the same
		// partition count to the same member: source, tiers and parking
		// are co-partitioned (DESIGN.md invariant 8).
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { e.cl.Store(cl); e.assigned(m) }),
		kgo.OnOffsetsFetched(e.offsetsFetched),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { e.cl.Store(cl); e.revoked(m, false) }),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, m map[string][]int32) { e.cl.Store(cl); e.revoked(m, true) }),
	)
	return copts
}
