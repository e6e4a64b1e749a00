package engine

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/parking"
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
	// parked is the records parked or on their way to parking over the
	// lanes in lanes: each keeps it in step (parking.Key.CountIn), so a
	// pause decision does not walk the lanes. blocked is the lanes counted
	// in Stats.BlockedKeys (lane.counted), held those in Stats.HeldKeys
	// (lane.heldCounted), both kept by syncBlocked.
	parked        parking.Tally
	blocked, held int
	// parkingBytes is the keys and values of the park moves decided and
	// not yet read back (parking.Key's pending, in bytes): they left the
	// source queue's count when a transaction took them, and join the
	// parking queue's when read back (pauses.go parkedFull).
	parkingBytes int
	// parkFull is whether the parked records hold the source paused, the
	// park bound's own hysteresis (pauses.go updatePauses).
	parkFull bool

	// restoring: the parking partition is being replayed up to the barrier
	// record with nonce; source and tier records wait in backlog.
	restoring      bool
	nonce          string
	barrierPending bool
	backlog        []*kgo.Record
	backlogBytes   int // keys, values and entryBytes each (pauses.go)
}

// queue is one consumed topic-partition: the records fetched and not yet
// committed, in offset order.
type queue struct {
	topic   string
	stage   int // 0 source, i tier i, parkStage
	entries []*entry
	// bytes is what entries hold: keys, values and entryBytes each
	// (heldBytes; pauses.go).
	bytes int
	// fresh counts the entries settled since the last transaction (see
	// settle).
	fresh int
	// due is, for a tier, its entries not yet handed to their lanes, with
	// their due times.
	due retrytopics.Schedule[*entry]
	// commit is the offset to commit: the first record not done (see
	// progress.go). Its Meta lists, for the source and the tiers, the
	// records past it that are done.
	commit    commitPoint
	hasCommit bool
	// progress is what the source's and the tiers' queues know of the
	// records past their committed offset (progress.go).
	progress
	// behind maps a parked source record to the record of its lane it is
	// written with or after (park; progress.go). A map, not an entry field:
	// few records have one, and every entry would pay for the field.
	behind map[*entry]*entry
	// seen is the offset after the last record taken; records below it
	// (fetched again after a rewind) are skipped.
	seen int64
	// p is the partition.
	p int32
	// paused is what the engine wants (updatePauses); applied what the
	// client was told (applyPauses).
	paused, applied bool
	// pauseQueued: the queue is in core.pauseQueue.
	pauseQueued bool
}

// entry is one fetched record on its way through delivery. It is made by
// newEntry and kept small (record.go): a blocked key holds two, a parked
// record one.
type entry struct {
	rec record
	q   *queue
	// origin is nil for a parking op (never delivered).
	origin *retrytopics.Origin
	// settled: its outcome is known and its moves are built. Its offset may
	// be committed once every earlier entry of its queue is settled too.
	settled bool
	// moved: its moves were handed to a transaction.
	moved bool
	// doneNow: settled and free to go with the next commit (progress.go;
	// valid while takeDone runs).
	doneNow bool
	// held is set once a failed delivery of it was held (overload gate;
	// see overload.go).
	held bool
	// started is when its delivery started, since monoStart.
	started time.Duration
	moves   []move
	// after runs once the transaction carrying its moves committed.
	after []func()
	// gapAfter is set on a released parked record behind a dead-lettered
	// head (kretry-gap-after).
	gapAfter string
}

// move is one record a transaction writes, with its event for observers.
type move struct {
	rec *kgo.Record
	ev  MoveEvent
	// due is a retry's kretry-due-time (zero for other moves).
	due time.Time
}

// lane serialises the records of one key of one partition (or, with
// ordering partition, of the whole partition). A record with a null key has
// a lane of its own that is not kept (keyed false).
type lane struct {
	sh      *shard
	key     string
	wait    []*entry
	running *entry
	keyed   bool
	queued  bool
	// tail is the lane's last parked source record while no transaction
	// has taken it: the record parked next is written with or after it
	// (park; untail).
	tail *entry

	// park is the key's parking state machine (ordering key or partition;
	// package parking); the fields below are the engine's bookkeeping of
	// the changelog ops it writes for the key (see parking.go). (The bools
	// sit together: a lane lives as long as its key is blocked.)
	park         parking.Key[*entry]
	unblock      *pendingUnblock // the key's unblock op until it commits or moves to its next block (see maybeUnblock)
	markers      []*entry        // block/release ops of the key, settled when it unblocks
	dlqGate      bool            // the dead-lettered head's DLQ write is not committed yet
	counted      bool            // counted in Stats.BlockedKeys
	heldCounted  bool            // counted in Stats.HeldKeys
	blockWritten bool            // a block op stands in the changelog
}

func (l *lane) blocked() bool { return l.park.Blocked() }

func (l *lane) idle() bool {
	return l.running == nil && len(l.wait) == 0 && !l.blocked() && len(l.markers) == 0 && !l.blockWritten && l.unblock == nil
}

// stageOf maps a consumed topic to its stage.
func (c *core) stageOf(topic string) int {
	if c.parking() && topic == c.opts.ParkingTopic {
		return parkStage
	}
	return c.plan.Stage(topic)
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
// shard starts restoring, its tiers paused (updatePauses).
func (c *core) shardFor(p int32) *shard {
	if sh, ok := c.shards[p]; ok {
		return sh
	}
	sh := &shard{p: p, queues: map[string]*queue{}, lanes: map[string]*lane{}}
	sh.src = &queue{topic: c.plan.Source, stage: 0, p: p}
	sh.queues[sh.src.topic] = sh.src
	for i, t := range c.plan.Tiers {
		q := &queue{topic: t.Topic, stage: i + 1, p: p}
		sh.tiers = append(sh.tiers, q)
		sh.queues[q.topic] = q
	}
	sh.order = append([]*queue{sh.src}, sh.tiers...)
	for _, q := range sh.order {
		if cp, ok := c.commits[q.topic][p]; ok {
			c.inherit(q, cp)
		}
	}
	if c.parking() {
		sh.park = &queue{topic: c.opts.ParkingTopic, stage: parkStage, p: p}
		sh.queues[sh.park.topic] = sh.park
		sh.order = append(sh.order, sh.park)
		sh.restoring = true
		sh.barrierPending = true
		sh.nonce = fmt.Sprintf("%s-%d-%d", c.instanceTag, c.gen, p)
	}
	c.shards[p] = sh
	c.updatePauses(sh, time.Now())
	return sh
}

// laneFor returns the lane of a record of shard sh.
func (c *core) laneFor(sh *shard, key []byte) *lane {
	var k string
	switch {
	case c.opts.Ordering == flow.OrderingPartition:
		k = ""
	case key == nil:
		return &lane{sh: sh}
	default:
		k = string(key)
	}
	l, ok := sh.lanes[k]
	if !ok {
		l = &lane{sh: sh, key: k, keyed: true}
		l.park.CountIn(&sh.parked)
		sh.lanes[k] = l
	}
	return l
}

// ingest takes polled records into their queues.
func (c *core) ingest(recs []*kgo.Record) {
	touched := map[*shard]bool{}
	for _, r := range recs {
		stage := c.stageOf(r.Topic)
		if stage == -1 && r.Topic != c.opts.ParkingTopic {
			continue // not ours
		}
		sh := c.shardFor(r.Partition)
		q := sh.queues[r.Topic]
		if q == nil || r.Offset < q.seen {
			continue // fetched again after a rewind: already taken
		}
		q.seen = r.Offset + 1
		if !q.hasCommit {
			q.commit.EpochOffset, q.hasCommit = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}, true
			q.end = r.Offset // nothing before it is left to read
		}
		touched[sh] = true
		if sh.restoring && stage != parkStage {
			sh.backlog = append(sh.backlog, r)
			sh.backlogBytes += len(r.Key) + len(r.Value) + entryBytes
			continue
		}
		c.accept(sh, q, r)
	}
	now := time.Now()
	for sh := range touched {
		c.updatePauses(sh, now)
	}
}

// accept takes one record into its queue and lane.
func (c *core) accept(sh *shard, q *queue, r *kgo.Record) {
	if q.stage != parkStage && q.skip(r) {
		return // done before a restart or a reset (progress.go)
	}
	switch q.stage {
	case 0:
		o, _ := retrytopics.ReadOrigin(r, true, 0)
		en := c.newEntry(q, r, &o)
		l := c.laneFor(sh, r.Key)
		if c.parking() && l.keyed && l.blocked() {
			c.park(l, en, l.tail)
			return
		}
		c.push(l, en)
	case parkStage:
		c.acceptParking(sh, q, r)
	default:
		o, err := retrytopics.ReadOrigin(r, false, int64(q.stage))
		if err != nil {
			c.warnOnce("origin:"+r.Topic, "record on a retry tier without readable kretry headers; delivering it now", "record_topic", r.Topic, "err", err)
		}
		q.due.Add(c.newEntry(q, r, &o), o.Due)
		c.schedule(q)
	}
}

// popFront removes and returns the first element of *s. Its slot is
// cleared and an emptied slice let go: a backing array must not keep a
// record that is done (its entry, its moves) or a dropped lane alive.
func popFront[T any](s *[]*T) *T {
	v := (*s)[0]
	(*s)[0] = nil
	*s = (*s)[1:]
	if len(*s) == 0 {
		*s = nil
	}
	return v
}

// push appends en to lane l and marks the lane ready if it is idle.
func (c *core) push(l *lane, en *entry) {
	l.wait = append(l.wait, en)
	c.markReady(l)
}

func (c *core) markReady(l *lane) {
	if l.queued || l.running != nil || len(l.wait) == 0 {
		return
	}
	l.queued = true
	if l.wait[0].q.stage == 0 {
		c.ready = append(c.ready, l)
	} else {
		c.retryReady = append(c.retryReady, l)
	}
}

// parkedCount is the records parked or on their way to parking.
func (sh *shard) parkedCount() int { return sh.parked.Parked() }

// releasedCount is the parked records released to their lanes (waiting or
// in delivery) and not yet routed: Stats.ParkedRecords still counts them,
// parkedCount no longer does. It walks the lanes: a reset asks it, once.
func (sh *shard) releasedCount() int {
	n := 0
	for _, l := range sh.lanes {
		for _, en := range l.wait {
			if en.q.stage == parkStage {
				n++
			}
		}
		if l.running != nil && l.running.q.stage == parkStage {
			n++
		}
	}
	return n
}

// blockedCount is the shard's keys counted in Stats.BlockedKeys.
func (sh *shard) blockedCount() int { return sh.blocked }
