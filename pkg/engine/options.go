package engine

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/overload"
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
	// flow.TransactionalID("kretry", InstanceID, Group), as `kretry run`
	// names it (with DynamicMembership, flow.DefaultInstanceID() stands
	// for InstanceID).
	TransactionalID string
	// InstanceID is the consumer's group.instance.id (KIP-345 static
	// membership): an instance restarted under the same id gets its
	// partitions back at once, without waiting for the session timeout or
	// a rebalance. It must be unique among the live members of the group
	// and stable across restarts; a second live member with the same id
	// fences the first, whose Run then returns a *FencedError. On a clean
	// stop the engine leaves the group explicitly (a static member does not
	// leave when its client closes), so its partitions move at once.
	// Letters, digits, '.', '_' and '-', at most flow.MaxInstanceIDLen
	// characters. Default flow.DefaultInstanceID(), the host's name, as
	// kafka.instance_id of `kretry run`: set it when two engines of one
	// group run on one host (or in one process).
	InstanceID string
	// DynamicMembership makes the engine a dynamic member of its group,
	// with no instance id (InstanceID must be empty then). Not a YAML key:
	// for a program that runs several engines of one group and does not
	// name each. A dynamic member that loses its session (a transaction
	// that failed in a broker outage) waits out the old member's session
	// timeout (45s on Kafka) before it gets its partitions back, and the
	// group cannot tell a twin from an outage, so a second session reset
	// within a minute stops Run (docs/RELIABILITY.md).
	DynamicMembership bool
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
	// has its own; this one also bounds in-process handlers. The handler's
	// context ends at most min(DeliveryTimeout/100, 10ms) later, never
	// earlier: deliveries starting that close together share one context
	// (deadline.go). A handler that ignores its context is abandoned as a
	// timeout 100ms after it ends.
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
	// MaxPending bounds the records held in memory per partition between
	// fetch and the transaction that takes them; past it the partition's
	// fetching pauses, and once half of it finished since the last
	// transaction the next one is due at once. A finished record is let go
	// of at the next transaction even while an earlier one of its partition
	// is still in delivery (see progress.go). Unset (the default), a
	// partition pauses once it holds its share of 65,536 records (at least
	// the larger of 4,096 and 32 × MaxInFlight) or its share of 64 MiB of
	// its own records' keys and values, ~256 bytes each beyond them (at
	// least 16 MiB), whichever comes first: records of 1 MiB pause it at
	// 16 records on 4 partitions, and one record larger than its share
	// pauses it alone. Set, it counts records only. Either way the source
	// also pauses while the parked records read back hold that share of
	// bytes (pauses.go). Each pause
	// costs a fetch: franz-go drops what it buffered for a paused
	// partition and fetches it again (docs/PERFORMANCE.md, "6 December,
	// later").
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
	// Overload, when set, gates every delivery (dependency breaker,
	// systemic-failure guard, retry budget, rate and adaptive limits; see
	// overload.go and package overload). nil gates nothing.
	Overload *overload.Gate
	// MaxAge, when positive, expires records whose original timestamp is
	// older when their delivery is due: OnExpired says what happens to
	// them, OnExpiredDeadLetter (default) or OnExpiredDrop.
	MaxAge    time.Duration
	OnExpired string

	// sharedPending: MaxPending was left to its default, and the assigned
	// partitions share the pending budgets (core.maxPending).
	sharedPending bool

	// txnTimeout, set by tests, replaces transactionTimeout.
	txnTimeout time.Duration
	// authLimit, set by tests, replaces authFailureLimit.
	authLimit time.Duration
	// commitMetaBudget, set by tests, replaces offsetmap.DefaultBudget.
	commitMetaBudget int
	// beforeEnd, set by tests, runs after a transaction's moves are
	// flushed and before it ends.
	beforeEnd func()
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
		o.sharedPending = true
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
	o.setIdentity()
	return nil
}

// setIdentity defaults InstanceID (unless DynamicMembership) and the
// TransactionalID named after it, as config.EngineOptions names them.
func (o *Options) setIdentity() {
	instance := o.InstanceID
	if instance == "" {
		instance = flow.DefaultInstanceID()
	}
	if o.InstanceID == "" && !o.DynamicMembership {
		o.InstanceID = instance
	}
	if o.TransactionalID == "" {
		o.TransactionalID = flow.TransactionalID(flow.DefaultTransactionalIDPrefix, instance, o.Group)
	}
}

// check reports a required field left empty, and the config's "embedded"
// among the seed brokers: it means the broker `kretry run` starts in its
// own process, which a program embedding the engine starts itself. (A host
// without a port is franz-go's default 9092, and is left to it.)
func (o *Options) check() error {
	var missing []string
	for _, f := range []struct {
		name  string
		unset bool
	}{{"Brokers", len(o.Brokers) == 0}, {"Plan.Source", o.Plan.Source == ""}, {"Group", o.Group == ""}, {"Deliverer", o.Deliverer == nil}} {
		if f.unset {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("engine: %s not set: Brokers, Plan.Source, Group and Deliverer are required", strings.Join(missing, ", "))
	}
	for i, b := range o.Brokers {
		if b == "embedded" {
			return fmt.Errorf(`engine: Brokers[%d] is "embedded", the broker kretry run starts in its own process: start one yourself (kfake.NewCluster, as the package example does) and pass its addresses`, i)
		}
	}
	return o.checkInstanceID()
}

// checkInstanceID reports an InstanceID that Kafka would refuse as a
// group.instance.id, or one set beside DynamicMembership.
func (o *Options) checkInstanceID() error {
	id := o.InstanceID
	if id != "" && o.DynamicMembership {
		return fmt.Errorf("engine: InstanceID %q and DynamicMembership are both set: a dynamic member has no instance id; leave InstanceID empty or DynamicMembership false", id)
	}
	if err := flow.CheckInstanceID(id); err != nil {
		return fmt.Errorf("engine: InstanceID %w", err)
	}
	return nil
}
