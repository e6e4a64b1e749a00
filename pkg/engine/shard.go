package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// parkStage is the stage index of the parking topic.
const parkStage = -1

// shard is the state of partition p of every topic the engine consumes:
// the source, the tiers and the parking topic (they are co-partitioned).
type shard struct {
	p      int32
	queues map[string]*queue
	order  []*queue // source, tiers, parking: the order moves are written in
	src    *queue
	tiers  []*queue
	park   *queue // nil without parking
	lanes  map[string]*lane

	// restoring: the parking partition is being replayed up to the barrier
	// record with nonce; source and tier records wait in backlog.
	restoring      bool
	nonce          string
	barrierPending bool
	backlog        []*kgo.Record
}

// queue is one consumed topic-partition: the records fetched and not yet
// committed, in offset order.
type queue struct {
	topic   string
	stage   int // 0 source, i tier i, parkStage
	entries []*entry
	// next is, for a tier, the first entry not yet handed to its lane.
	next int
	// commit is the offset to commit: the first entry not settled.
	commit    kgo.EpochOffset
	hasCommit bool
	// seen is the offset after the last record taken; records below it
	// (fetched again after a rewind) are skipped.
	seen   int64
	paused bool
}

// entry is one fetched record on its way through delivery.
type entry struct {
	rec    *kgo.Record
	q      *queue
	origin retrytopics.Origin
	due    time.Time
	// settled: its outcome is known and its moves are built. Its offset may
	// be committed once every earlier entry of its queue is settled too.
	settled bool
	// moved: its moves were handed to a transaction.
	moved bool
	moves []move
	// after runs once the transaction carrying its moves committed.
	after []func()
	// gapAfter is set on a released parked record behind a dead-lettered
	// head (kretry-gap-after).
	gapAfter string
	// op is the parking op of a marker record ("" for a record).
	op string
	// started is when its delivery started.
	started time.Time
}

// move is one record a transaction writes, with its event for observers.
type move struct {
	rec *kgo.Record
	ev  MoveEvent
}

// lane serialises the records of one key of one partition (or, with
// ordering partition, of the whole partition). A record with a null key has
// a lane of its own that is not kept (keyed false).
type lane struct {
	sh      *shard
	key     string
	keyed   bool
	wait    []*entry
	running *entry
	queued  bool

	// Parking state (ordering key or partition); see parking.go.
	dlqGate       bool            // the dead-lettered head's DLQ write is not committed yet
	unblock       *pendingUnblock // the key's unblock op until it commits or moves to its next block (see maybeUnblock)
	counted       bool            // counted in Stats.BlockedKeys
	heads         map[string]bool // ce-ids of the key's records in the tiers (blocks not yet released)
	releasing     bool            // delivering parked records one by one
	hold          bool            // head dead-lettered under flow.OnDeadLetterHold
	deadLettering bool            // head dead-lettered under flow.OnDeadLetterDeadLetter
	gapAfter      string          // ce-id of the dead-lettered head, for released records
	parked        []*entry        // parked records read back, in order, not yet released
	pendingParks  int             // parking moves decided but not yet read back
	blockWritten  bool            // a block op stands in the changelog
	markers       []*entry        // block/release ops of the key, settled when it unblocks
}

func (l *lane) blocked() bool {
	return len(l.heads) > 0 || l.releasing || l.hold || l.deadLettering || len(l.parked) > 0 || l.pendingParks > 0
}

func (l *lane) idle() bool {
	return l.running == nil && len(l.wait) == 0 && !l.blocked() && len(l.markers) == 0 && !l.blockWritten && l.unblock == nil
}

// stageOf maps a consumed topic to its stage.
func (e *Engine) stageOf(topic string) int {
	if e.parking() && topic == e.opts.ParkingTopic {
		return parkStage
	}
	return e.plan.Stage(topic)
}

func stageName(stage int) flow.Stage {
	switch {
	case stage == 0:
		return flow.StageSource
	case stage == parkStage:
		return flow.StageParking
	default:
		return flow.TierStage(stage)
	}
}

// shardFor returns partition p's shard, creating it: with parking, a new
// shard starts restoring, its source and tiers paused.
func (e *Engine) shardFor(p int32) *shard {
	if sh, ok := e.shards[p]; ok {
		return sh
	}
	sh := &shard{p: p, queues: map[string]*queue{}, lanes: map[string]*lane{}}
	sh.src = &queue{topic: e.plan.Source, stage: 0}
	sh.queues[sh.src.topic] = sh.src
	for i, t := range e.plan.Tiers {
		q := &queue{topic: t.Topic, stage: i + 1}
		sh.tiers = append(sh.tiers, q)
		sh.queues[q.topic] = q
	}
	sh.order = append([]*queue{sh.src}, sh.tiers...)
	if e.parking() {
		sh.park = &queue{topic: e.opts.ParkingTopic, stage: parkStage}
		sh.queues[sh.park.topic] = sh.park
		sh.order = append(sh.order, sh.park)
		sh.restoring = true
		sh.barrierPending = true
		sh.nonce = fmt.Sprintf("%s-%d-%d", e.instanceTag, e.gen, p)
	}
	e.shards[p] = sh
	e.updatePauses(sh, time.Now())
	return sh
}

// laneFor returns the lane of a record of shard sh.
func (e *Engine) laneFor(sh *shard, key []byte) *lane {
	var k string
	switch {
	case e.opts.Ordering == flow.OrderingPartition:
		k = ""
	case key == nil:
		return &lane{sh: sh}
	default:
		k = string(key)
	}
	l, ok := sh.lanes[k]
	if !ok {
		l = &lane{sh: sh, key: k, keyed: true}
		sh.lanes[k] = l
	}
	return l
}

// ingest takes polled records into their queues.
func (e *Engine) ingest(recs []*kgo.Record) {
	touched := map[*shard]bool{}
	for _, r := range recs {
		stage := e.stageOf(r.Topic)
		if stage == -1 && r.Topic != e.opts.ParkingTopic {
			continue // not ours
		}
		sh := e.shardFor(r.Partition)
		q := sh.queues[r.Topic]
		if q == nil || r.Offset < q.seen {
			continue // fetched again after a rewind: already taken
		}
		q.seen = r.Offset + 1
		if !q.hasCommit {
			q.commit, q.hasCommit = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}, true
		}
		touched[sh] = true
		if sh.restoring && stage != parkStage {
			sh.backlog = append(sh.backlog, r)
			continue
		}
		e.accept(sh, q, r)
	}
	now := time.Now()
	for sh := range touched {
		e.updatePauses(sh, now)
	}
}

// accept takes one record into its queue and lane.
func (e *Engine) accept(sh *shard, q *queue, r *kgo.Record) {
	en := &entry{rec: r, q: q}
	q.entries = append(q.entries, en)
	switch q.stage {
	case 0:
		en.origin, _ = retrytopics.ReadOrigin(r, true, 0)
		l := e.laneFor(sh, r.Key)
		if e.parking() && l.keyed && l.blocked() {
			e.park(l, en)
			return
		}
		e.push(l, en)
	case parkStage:
		e.acceptParking(sh, en)
	default:
		o, err := retrytopics.ReadOrigin(r, false, int64(q.stage))
		if err != nil {
			e.warnOnce("origin:"+r.Topic, "record on a retry tier without readable kretry headers; delivering it now", "record_topic", r.Topic, "err", err)
		}
		en.origin, en.due = o, o.Due
	}
}

// push appends en to lane l and marks the lane ready if it is idle.
func (e *Engine) push(l *lane, en *entry) {
	l.wait = append(l.wait, en)
	e.markReady(l)
}

func (e *Engine) markReady(l *lane) {
	if l.queued || l.running != nil || len(l.wait) == 0 {
		return
	}
	l.queued = true
	if l.wait[0].q.stage == 0 {
		e.ready = append(e.ready, l)
	} else {
		e.retryReady = append(e.retryReady, l)
	}
}

// dispatch hands due tier records to their lanes and starts deliveries
// while in-flight slots are free.
func (e *Engine) dispatch(now time.Time) {
	if e.stopping {
		return
	}
	for _, sh := range e.shards {
		if sh.restoring {
			continue
		}
		if e.opts.Ordering == flow.OrderingKey {
			e.maybeSpill(sh, now)
		}
		for _, q := range sh.tiers {
			for q.next < len(q.entries) && !q.entries[q.next].due.After(now) {
				en := q.entries[q.next]
				q.next++
				e.push(e.laneFor(sh, en.rec.Key), en)
			}
		}
		e.updatePauses(sh, now)
	}
	// Retries go first, up to their share, so a backlog of first attempts
	// cannot make them late; first attempts take every slot left, and at
	// least the share retries may not use.
	retryCap := max(1, int(e.opts.RetryShare*float64(e.opts.MaxInFlight)))
	for len(e.retryReady) > 0 && e.inflight < e.opts.MaxInFlight && e.retrying < retryCap {
		l := e.retryReady[0]
		e.retryReady = e.retryReady[1:]
		e.start(l)
	}
	for len(e.ready) > 0 && e.inflight < e.opts.MaxInFlight {
		l := e.ready[0]
		e.ready = e.ready[1:]
		e.start(l)
	}
}

// nextDue returns the earliest due time of a tier record not yet handed to
// its lane.
func (e *Engine) nextDue() (time.Time, bool) {
	var next time.Time
	for _, sh := range e.shards {
		if sh.restoring {
			continue
		}
		for _, q := range sh.tiers {
			if q.next < len(q.entries) {
				if d := q.entries[q.next].due; next.IsZero() || d.Before(next) {
					next = d
				}
			}
		}
	}
	return next, !next.IsZero()
}

// result is one finished delivery.
type result struct {
	gen   uint64
	lane  *lane
	en    *entry
	retry bool
	err   error
	took  time.Duration
	msg   *delivery.Message
}

// start delivers the next entry of lane l.
func (e *Engine) start(l *lane) {
	l.queued = false
	if l.running != nil || len(l.wait) == 0 {
		return
	}
	en := l.wait[0]
	l.wait = l.wait[1:]
	l.running = en
	retry := en.q.stage != 0
	e.inflight++
	if retry {
		e.retrying++
	}
	o := &en.origin
	m := &delivery.Message{
		ID:        o.ID(),
		Topic:     o.Topic,
		Partition: o.Partition,
		Offset:    o.Offset,
		Timestamp: o.Timestamp,
		Key:       en.rec.Key,
		Value:     en.rec.Value,
		Headers:   o.Headers,
		Attempt:   attemptOf(o.Attempts),
		GapAfter:  en.gapAfter,
	}
	en.started = time.Now()
	r := &result{gen: e.gen, lane: l, en: en, retry: retry, msg: m}
	e.deliveries.Add(1)
	e.stats.InFlight.Add(1)
	go func() {
		defer e.deliveries.Done()
		ctx, cancel := context.WithTimeout(e.hard, e.opts.DeliveryTimeout)
		start := time.Now()
		r.err = e.deliverSafely(ctx, m)
		r.took = time.Since(start)
		cancel()
		e.stats.InFlight.Add(-1)
		// Apply the result and start the next deliveries right here: going
		// through the poll loop would leave the slot idle for a loop turn.
		e.mu.Lock()
		e.apply(r)
		if !e.stopping && !e.needAbort.Load() {
			e.dispatch(time.Now())
		}
		early := e.settled >= e.opts.MaxPending/2
		e.mu.Unlock()
		if early {
			e.wake() // a commit is due
		}
	}()
}

// ErrHandlerPanic wraps the value of a delivery that panicked; it is
// classified as transient.
var ErrHandlerPanic = errors.New("handler panicked")

// deliverSafely delivers m, turning a panic of the handler into an error
// (transient) instead of a crash of the process, and a handler that does
// not return once ctx is done into a timeout: its slot is freed and its
// late answer is ignored.
func (e *Engine) deliverSafely(ctx context.Context, m *delivery.Message) error {
	if delivery.BoundByContext(e.opts.Deliverer) {
		// net/http ends a request when its context ends (delivery.HTTP, and
		// wrappers of it such as delivery.Health): no watchdog goroutine
		// needed (it would cost one more goroutine per record).
		return e.opts.Deliverer.Deliver(ctx, m)
	}
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				e.warnOnce("panic", "the delivery handler panicked; treating it as a transient failure", "id", m.ID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				done <- fmt.Errorf("%w: %v", ErrHandlerPanic, v)
			}
		}()
		done <- e.opts.Deliverer.Deliver(ctx, m)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done:
			return err
		case <-time.After(abandonAfter):
			e.warnOnce("hung", "a delivery did not return after its context ended (the handler ignores its context?); treating it as a timeout", "id", m.ID)
			return fmt.Errorf("delivery of %s abandoned: %w", m.ID, context.DeadlineExceeded)
		}
	}
}

// abandonAfter is how long a delivery may run past its deadline before its
// slot is taken back.
const abandonAfter = 100 * time.Millisecond

// apply routes one finished delivery.
func (e *Engine) apply(r *result) {
	e.inflight--
	if r.retry {
		e.retrying--
	}
	if r.gen != e.gen {
		return // its shard was dropped; the record is delivered again
	}
	l, en := r.lane, r.en
	l.running = nil
	if r.err != nil && e.hard.Err() != nil {
		return // abandoned at shutdown: left uncommitted
	}
	stage := en.q.stage
	ev := DeliveryEvent{
		Group: e.opts.Group, Topic: en.rec.Topic, Partition: en.rec.Partition, Source: e.plan.Source,
		Stage: stageName(stage), Outcome: flow.OutcomeOK, Duration: r.took, Attempt: r.msg.Attempt,
	}
	var v *delivery.Verdict
	if r.err != nil {
		vv := delivery.Classify(r.err, *e.opts.Statuses)
		v = &vv
		e.stats.Failed.Add(1)
		ev.Outcome, ev.Status, ev.ErrorType = flow.Outcome(vv.Class), vv.Status, delivery.ErrorType(r.err, vv)
		if vv.Unlisted {
			e.warnOnce("unlisted:"+ev.ErrorType, "delivery failed with an unlisted status or error; treating it as transient", "status", vv.Status, "err", vv.Message)
		}
	} else {
		e.stats.Delivered.Add(1)
	}
	e.obs.Delivered(ev)

	routeStage := stage
	if stage == parkStage {
		routeStage = 0 // a parked record's first attempt
	}
	route := e.plan.Route(routeStage, v, retrytopics.Jitter())
	now := time.Now()
	if route.Action != retrytopics.Done {
		f := retrytopics.Failure{Class: route.Class, Status: v.Status, Message: v.Message, At: now}
		if route.Class == delivery.ClassExhausted {
			f.Message = "retry tiers exhausted; last error: " + v.Message
		}
		e.addMove(en, route, f)
		if last := en.moves[len(en.moves)-1].rec; e.tooLarge(last) {
			// The record cannot be written to its next stage at all. It
			// stays unsettled — never lost, never committed past — and
			// holds its lane and its partition's commit until an operator
			// raises the topic's max.message.bytes and restarts kretry.
			en.moves = en.moves[:len(en.moves)-1]
			l.running = en
			e.stats.Stuck.Add(1)
			e.log.Error("a record does not fit its next topic even with an empty error message; it holds its partition until max.message.bytes is raised there and kretry restarts",
				"id", en.origin.ID(), "topic", last.Topic, "record_bytes", retrytopics.RecordSize(last), "max_message_bytes", e.topics.MaxBytes[last.Topic])
			return
		}
	}
	en.settled = true
	if en.q.stage != parkStage { // parking entries are not counted (see prepare)
		e.settled++
	}
	if e.parking() && l.keyed {
		e.afterDelivery(l, en, route)
	}
	e.markReady(l)
	e.forget(l)
}

// addMove builds en's move for route.
func (e *Engine) addMove(en *entry, route retrytopics.Route, f retrytopics.Failure) {
	m := retrytopics.Move{
		Origin:   en.origin,
		Key:      en.rec.Key,
		Value:    en.rec.Value,
		Topic:    route.Topic,
		Failure:  f,
		Group:    e.opts.Group,
		Version:  flow.Version,
		MaxBytes: e.topics.MaxBytes[route.Topic],
	}
	ev := MoveEvent{Group: e.opts.Group, Source: e.plan.Source, From: en.rec.Topic, To: route.Topic, Class: string(route.Class)}
	switch route.Action {
	case retrytopics.Retry:
		m.Due = retrytopics.DueTime(f.At, route.Delay)
		ev.Kind, ev.Stage = flow.MoveRetry, stageName(route.Stage)
	case retrytopics.DeadLetter:
		ev.Kind, ev.Stage = flow.MoveDeadLetter, flow.StageDLQ
	}
	r := m.Record()
	// Stages are co-partitioned: the move stays on the partition it was read
	// from, whatever a (possibly forged) header says.
	r.Partition = en.rec.Partition
	en.moves = append(en.moves, move{rec: r, ev: ev})
}

// tooLarge reports whether r exceeds its topic's max.message.bytes.
func (e *Engine) tooLarge(r *kgo.Record) bool {
	n := e.topics.MaxBytes[r.Topic]
	return n > 0 && retrytopics.RecordSize(r) > n
}

// forget drops an idle keyed lane so that the lane map stays bounded by the
// keys in flight.
func (e *Engine) forget(l *lane) {
	if l.keyed && l.idle() && !l.queued {
		if cur, ok := l.sh.lanes[l.key]; ok && cur == l {
			delete(l.sh.lanes, l.key)
		}
	}
}

// attemptOf is the ce-attempt of a record with attempts deliveries behind
// it, saturating instead of wrapping.
func attemptOf(attempts int64) int {
	const most = 1<<31 - 1
	if attempts < 0 || attempts >= most {
		return most
	}
	return int(attempts) + 1
}

// updatePauses pauses or resumes sh's partitions: a restoring shard's
// source and tiers; a source with MaxPending records held or MaxParked
// records parked; a tier whose next record is not due or that holds
// MaxPending records.
func (e *Engine) updatePauses(sh *shard, now time.Time) {
	var pause, resume map[string][]int32
	set := func(q *queue, want bool) {
		if q.paused == want {
			return
		}
		q.paused = want
		m := &resume
		if want {
			m = &pause
		}
		if *m == nil {
			*m = map[string][]int32{}
		}
		(*m)[q.topic] = append((*m)[q.topic], sh.p)
	}
	full := func(q *queue) bool {
		if q.paused {
			return len(q.entries) >= e.opts.MaxPending/2 // hysteresis
		}
		return len(q.entries) >= e.opts.MaxPending
	}
	set(sh.src, sh.restoring || full(sh.src) || (e.parking() && sh.parkedCount() >= e.opts.MaxParked))
	for _, q := range sh.tiers {
		notDue := q.next < len(q.entries) && q.entries[q.next].due.After(now)
		set(q, sh.restoring || notDue || full(q))
	}
	if pause != nil {
		e.cl.Load().PauseFetchPartitions(pause)
	}
	if resume != nil {
		e.cl.Load().ResumeFetchPartitions(resume)
	}
}

// parkedCount is the records parked or on their way to parking.
func (sh *shard) parkedCount() int {
	n := 0
	for _, l := range sh.lanes {
		n += len(l.parked) + l.pendingParks
	}
	return n
}

func (sh *shard) blockedCount() int {
	n := 0
	for _, l := range sh.lanes {
		if l.counted {
			n++
		}
	}
	return n
}

// txn is what one transaction carries.
type txn struct {
	gen      uint64
	moves    []move
	offsets  map[string]map[int32]kgo.EpochOffset
	after    []func()
	records  int
	barriers []*shard
}

// prepare collects the moves and commit offsets of every settled prefix,
// the moves of settled parking entries (see parking.go: they are idempotent
// through their settle ops) and pending barriers. It returns nil when there
// is nothing new.
func (e *Engine) prepare() *txn {
	e.lastCommit = time.Now()
	e.settled = 0
	tx := &txn{gen: e.gen, offsets: map[string]map[int32]kgo.EpochOffset{}}
	take := func(en *entry) {
		if en.moved {
			return
		}
		en.moved = true
		tx.moves = append(tx.moves, en.moves...)
		tx.after = append(tx.after, en.after...)
	}
	advanced := false
	tx.moves = append(tx.moves, e.loose...)
	tx.after = append(tx.after, e.looseAfter...)
	e.loose, e.looseAfter = nil, nil
	for _, sh := range e.shards {
		if sh.barrierPending {
			tx.moves = append(tx.moves, move{rec: e.barrierRecord(sh)})
			tx.barriers = append(tx.barriers, sh)
		}
		for _, q := range sh.order {
			if q.stage == parkStage {
				for _, en := range q.entries {
					if en.settled {
						take(en)
					}
				}
			}
			n := 0
			for n < len(q.entries) && q.entries[n].settled {
				take(q.entries[n])
				n++
			}
			if n > 0 {
				last := q.entries[n-1].rec
				q.commit = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}
				q.entries = q.entries[n:]
				q.next = max(q.next-n, 0)
				tx.records += n
				advanced = true
			}
			if q.hasCommit {
				if tx.offsets[q.topic] == nil {
					tx.offsets[q.topic] = map[int32]kgo.EpochOffset{}
				}
				tx.offsets[q.topic][sh.p] = q.commit
			}
		}
	}
	if !advanced && len(tx.moves) == 0 {
		return nil
	}
	return tx
}

// transactionTimeout is the producer's transaction timeout and the bound on
// one commit: a transaction open longer is aborted by its coordinator
// anyway, so waiting longer for End (which waits for a heartbeat the group
// may not be running while it rejoins after a broker failure) only stalls
// every partition.
const transactionTimeout = 15 * time.Second

// shutdownCommitTimeout bounds the final commit at shutdown: seen on Kafka
// after a broker outage, End waited for a heartbeat that never came and a
// SIGTERM took a minute. Past it the transaction aborts and the next owner
// delivers its records again.
const shutdownCommitTimeout = 10 * time.Second

// commit runs tx as one transaction, bounded by timeout. A transaction that does not commit
// drops all state (after in-flight deliveries end): the records after the
// last commit are read and delivered again. Only a fatal producer error is
// returned.
func (e *Engine) commit(tx *txn, timeout time.Duration) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := e.sess.Begin(); err != nil {
		// Only a transaction still open after a failed End gets here: the
		// producer is in a state the engine cannot use; a new session can.
		return fmt.Errorf("%w: the transactional producer %q cannot begin a transaction after the last one failed to end (%v): %w",
			errSessionReset, e.opts.TransactionalID, e.lastEndErr, err)
	}
	var (
		produceErr error
		errMu      sync.Mutex
	)
	for _, m := range tx.moves {
		e.sess.Produce(ctx, m.rec, func(r *kgo.Record, err error) {
			if err != nil {
				errMu.Lock()
				produceErr = errors.Join(produceErr, fmt.Errorf("writing to %s/%d: %w", r.Topic, r.Partition, err))
				errMu.Unlock()
			}
		})
	}
	flushErr := e.sess.Client().Flush(ctx)
	errMu.Lock() // a promise may still run after a failed Flush
	produceErr = errors.Join(produceErr, flushErr)
	perr := produceErr
	errMu.Unlock()
	try := kgo.TryCommit
	if perr != nil {
		e.log.Error("a move failed; aborting the transaction, its records will be delivered again", "err", perr)
		try = kgo.TryAbort
	}
	if e.opts.beforeEnd != nil {
		e.opts.beforeEnd()
	}
	// The session would commit the fetched positions; commit instead, per
	// partition, the first record not yet settled. A partition the session
	// lists that the engine does not know keeps its last committed offset
	// (never the fetched position, which may be past unsettled records); a
	// partition the engine knows that the session left out is added.
	committedBefore := e.sess.Client().CommittedOffsets()
	var unknown []string
	fctx := kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		seen := map[string]map[int32]bool{}
		for i := range req.Topics {
			t := &req.Topics[i]
			seen[t.Topic] = map[int32]bool{}
			for j := range t.Partitions {
				p := &t.Partitions[j]
				seen[t.Topic][p.Partition] = true
				if o, ok := tx.offsets[t.Topic][p.Partition]; ok {
					p.Offset, p.LeaderEpoch = o.Offset, o.Epoch
				} else if c, ok := committedBefore[t.Topic][p.Partition]; ok {
					p.Offset, p.LeaderEpoch = c.Offset, c.Epoch
					unknown = append(unknown, fmt.Sprintf("%s/%d", t.Topic, p.Partition))
				}
			}
		}
		for topic, ps := range tx.offsets {
			for part, o := range ps {
				if seen[topic][part] || (committedBefore[topic][part] == o) {
					continue
				}
				i := slices.IndexFunc(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool { return t.Topic == topic })
				if i < 0 {
					rt := kmsg.NewTxnOffsetCommitRequestTopic()
					rt.Topic = topic
					req.Topics = append(req.Topics, rt)
					i = len(req.Topics) - 1
				}
				rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
				rp.Partition, rp.Offset, rp.LeaderEpoch = part, o.Offset, o.Epoch
				req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
			}
		}
		if len(req.Topics) == 0 {
			// Commit one unchanged offset rather than none: franz-go
			// (v1.22.3) reads KIP-447 support off the TxnOffsetCommit
			// response, and a transaction without one (only barriers or
			// parking ops) would hold the session's lock for 500ms after
			// ending, as for a pre-2.5 broker.
			for topic, ps := range committedBefore {
				for part, o := range ps {
					rt := kmsg.NewTxnOffsetCommitRequestTopic()
					rt.Topic = topic
					rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch = part, o.Offset, o.Epoch
					rt.Partitions = append(rt.Partitions, rp)
					req.Topics = append(req.Topics, rt)
					return nil
				}
			}
		}
		return nil
	})
	committed, err := e.sess.End(fctx, try)
	e.lastEndErr = err
	if fencedErr := errors.Join(err, perr); isFenced(fencedErr) {
		e.stats.Aborted.Add(1)
		return e.fencedOrReset(fencedErr)
	}
	if len(unknown) > 0 {
		e.warnOnce("unknown-commit", "the transaction listed partitions the engine holds no state for; their committed offsets were kept", "partitions", unknown)
	}
	e.obs.Committed(CommitEvent{Group: e.opts.Group, Source: e.plan.Source, Committed: committed && err == nil, Records: tx.records, Duration: time.Since(start)})
	if err != nil || !committed {
		e.stats.Aborted.Add(1)
		if err != nil {
			e.log.Warn("transaction did not commit; records after the last commit will be delivered again", "err", err)
		} else if try == kgo.TryCommit {
			e.log.Info("transaction aborted by a rebalance; records after the last commit will be delivered again")
		}
		e.mu.Lock()
		if tx.gen == e.gen {
			e.resetLocked()
		}
		e.mu.Unlock()
		e.waitDeliveries(e.opts.DeliveryTimeout + time.Second)
		if err != nil {
			// An End that failed may have returned before rewinding the
			// consumer to the committed offsets (franz-go returns at once
			// when its flush or abort of buffered records runs out of
			// time, as in a broker outage), and left the producer inside
			// the transaction. The state of those records is dropped
			// above: without a new session they would be delivered again
			// only once a new record made the next Begin fail — on a
			// quiet partition, never. A new session starts at the
			// committed offsets.
			return fmt.Errorf("%w: the transaction did not end: %w", errSessionReset, err)
		}
		return nil
	}
	e.stats.Batches.Add(1)
	e.mu.Lock()
	defer e.mu.Unlock()
	if tx.gen != e.gen {
		return nil
	}
	for _, f := range tx.after {
		f()
	}
	for _, sh := range tx.barriers {
		sh.barrierPending = false
	}
	for _, m := range tx.moves {
		switch m.ev.Kind {
		case flow.MoveRetry:
			if i := e.plan.Stage(m.ev.To); i > 0 {
				e.stats.Retried[i-1].Add(1)
			}
		case flow.MoveDeadLetter:
			if m.ev.Class == string(delivery.ClassExhausted) {
				e.stats.Exhausted.Add(1)
			} else {
				e.stats.Permanent.Add(1)
			}
		case flow.MovePark:
			e.stats.Parked.Add(1)
		default:
			continue
		}
		e.obs.Moved(m.ev)
	}
	return nil
}
