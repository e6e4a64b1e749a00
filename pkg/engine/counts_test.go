package engine

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/parking"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// sim drives the engine's state core (core.go) for one partition with
// ordering key and no broker: records are ingested, delivered (with the
// outcome the test picks) and committed by calling the core's own steps,
// and what a transaction writes to a tier or the parking topic is read
// back as the broker would return it.
type sim struct {
	t    *testing.T
	c    *core
	sh   *shard
	logs map[string][]*kgo.Record // every record written, per topic
	// fetched, when set, sees each record as it is ingested (a copy of
	// the one in logs).
	fetched func(*kgo.Record)
	// maxHeld is the most keys held at one check.
	maxHeld int
}

func newSim(t *testing.T, policy flow.OnDeadLetter) *sim {
	src := "orders"
	plan := retrytopics.Plan{Source: src, DLQ: retrytopics.DLQTopic(src),
		Tiers: []retrytopics.Tier{{Topic: retrytopics.TierTopic(src, time.Minute), Delay: time.Minute}}}
	o := Options{Brokers: []string{"unused"}, Plan: plan, Group: "g", Deliverer: delivery.HandlerFunc(nil),
		Ordering: flow.OrderingKey, ParkingTopic: retrytopics.ParkingTopic(src), OnDeadLetter: policy}
	e := newTestCore(t, o)
	s := &sim{t: t, c: e, logs: map[string][]*kgo.Record{}}
	s.sh = e.shardFor(0)
	s.read(e.barrierRecord(s.sh)) // restored from an empty parking partition
	if s.sh.restoring {
		t.Fatal("the shard did not finish restoring at its barrier")
	}
	return s
}

// read writes a copy of r at the end of its topic and ingests it.
func (s *sim) read(r *kgo.Record) {
	c := *r
	c.Partition, c.Offset = 0, int64(len(s.logs[r.Topic]))
	s.logs[r.Topic] = append(s.logs[r.Topic], &c)
	f := c // what the client returns is not what the test keeps
	if s.fetched != nil {
		s.fetched(&f)
	}
	s.c.ingest([]*kgo.Record{&f})
}

// reassign drops the state, as a rebalance does, and takes the partition
// again: the parking partition is replayed from its committed offset up to
// a new barrier, the source and the tier are read again from theirs.
func (s *sim) reassign() {
	from := map[string]int64{}
	for topic, q := range s.sh.queues {
		from[topic] = q.commit.Offset // 0 when nothing was committed
	}
	s.c.reset()
	s.sh = s.c.shardFor(0)
	park := s.c.opts.ParkingTopic
	s.c.ingest(s.logs[park][from[park]:])
	s.read(s.c.barrierRecord(s.sh))
	for topic, q := range s.sh.queues {
		if q != s.sh.park {
			s.c.ingest(s.logs[topic][from[topic]:])
		}
	}
}

// deliver runs the next delivery of a random lane that has one, as start
// and a delivery goroutine would, with a random outcome.
func (s *sim) deliver(rnd *rand.Rand) {
	var ready []*lane
	for _, l := range s.sh.lanes {
		if l.running == nil && len(l.wait) > 0 {
			ready = append(ready, l)
		}
	}
	if len(ready) == 0 {
		return
	}
	var err error
	switch rnd.IntN(4) {
	case 0:
		err = e503
	case 1:
		err = e422
	}
	s.deliverNext(ready[rnd.IntN(len(ready))], err)
}

// deliverNext runs the delivery of lane l's next entry, which answers err.
func (s *sim) deliverNext(l *lane, err error) {
	en := l.wait[0]
	l.wait = l.wait[1:]
	l.running, l.queued = en, false
	retry := en.q.stage != 0
	s.c.inflight++
	if retry {
		s.c.retrying++
	}
	s.c.apply(&result{gen: s.c.gen, lane: l, en: en, retry: retry, err: err,
		msg: &delivery.Message{Attempt: attemptOf(en.origin.Attempts)}})
}

// commit runs a transaction's bookkeeping and reads back what it wrote to
// the tier and the parking topic.
func (s *sim) commit() {
	tx := s.c.prepare()
	if tx == nil {
		return
	}
	s.c.committed(tx)
	for _, m := range tx.moves {
		if m.rec.Topic != s.c.plan.DLQ {
			s.read(m.rec)
		}
	}
}

// check compares the shard's counts with a walk of its lanes.
func (s *sim) check(step int, op string) {
	s.t.Helper()
	parked, blocked, held := 0, 0, 0
	for _, l := range s.sh.lanes {
		parked += l.park.Parked()
		if l.counted {
			blocked++
		}
		if l.keyed && l.park.State() == parking.Held {
			held++
		}
	}
	if g := s.c.stats.HeldKeys.Load(); g != int64(held) {
		s.t.Fatalf("step %d (%s): HeldKeys gauge = %d, the lanes hold %d", step, op, g, held)
	}
	s.maxHeld = max(s.maxHeld, held)
	if got := s.sh.parkedCount(); got != parked {
		s.t.Fatalf("step %d (%s): parkedCount() = %d, the lanes hold %d", step, op, got, parked)
	}
	if got := s.sh.blockedCount(); got != blocked {
		s.t.Fatalf("step %d (%s): blockedCount() = %d, the lanes count %d", step, op, got, blocked)
	}
	if g := s.c.stats.BlockedKeys.Load(); g != int64(blocked) {
		s.t.Fatalf("step %d (%s): BlockedKeys gauge = %d, the lanes count %d", step, op, g, blocked)
	}
	// The gauge also counts released parked records until their delivery
	// is routed.
	if g, want := s.c.stats.ParkedRecords.Load(), int64(parked+s.sh.releasedCount()); g != want {
		s.t.Fatalf("step %d (%s): ParkedRecords gauge = %d, the lanes hold %d", step, op, g, want)
	}
}

// TestShardCountsEqualTheWalk runs random sequences of the engine's
// parking events (records of a few keys fetched, delivered with random
// outcomes, spilled, committed and read back from the tier and the parking
// topic, operator releases, tier records coming due, the partition
// reassigned and its parking partition replayed) and checks after each
// that the shard's O(1) counts equal a walk over its lanes (they are read on
// every pause decision), and that the BlockedKeys and ParkedRecords gauges
// agree with them, also across a reset.
func TestShardCountsEqualTheWalk(t *testing.T) {
	policies := []flow.OnDeadLetter{flow.OnDeadLetterRelease, flow.OnDeadLetterHold, flow.OnDeadLetterDeadLetter}
	for seed := range uint64(30) {
		policy := policies[seed%3]
		t.Run(strconv.FormatUint(seed, 10)+"-"+string(policy), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 10))
			s := newSim(t, policy)
			keys := []string{"a", "b", "c", "d", "e"}
			now := time.Now()
			maxParked := 0
			for step := range 600 {
				var op string
				switch n := rnd.IntN(20); {
				case n < 6:
					op = "fetch"
					s.read(&kgo.Record{Topic: s.c.plan.Source, Key: []byte(keys[rnd.IntN(len(keys))]), Value: []byte("v")})
				case n < 12:
					op = "deliver"
					s.deliver(rnd)
				case n < 15:
					op = "commit"
					s.commit()
				case n < 17:
					op = "due"
					now = now.Add(time.Minute)
					for _, q := range s.sh.tiers { // as dispatch does
						for _, en := range q.due.TakeDue(now.Add(time.Minute)) {
							s.c.push(s.c.laneFor(s.sh, en.rec.Key), en)
						}
					}
				case n < 18 && rnd.IntN(3) == 0:
					op = "reassign"
					s.reassign()
				case n < 18:
					op = "spill"
					s.c.maybeSpill(s.sh, now.Add(time.Hour))
				default:
					op = "operator release"
					s.read(OperatorRelease(s.c.opts.ParkingTopic, 0, []byte(keys[rnd.IntN(len(keys))])))
				}
				s.check(step, op)
				maxParked = max(maxParked, s.sh.parkedCount())
			}
			if maxParked == 0 {
				t.Fatal("no record was ever parked: the sequence tests nothing")
			}
			s.c.reset()
			if g := s.c.stats.BlockedKeys.Load(); g != 0 {
				t.Fatalf("after a reset the BlockedKeys gauge is %d, want 0", g)
			}
			if g := s.c.stats.HeldKeys.Load(); g != 0 {
				t.Fatalf("after a reset the HeldKeys gauge is %d, want 0", g)
			}
			if policy == flow.OnDeadLetterHold && s.maxHeld == 0 {
				t.Fatal("no key was ever held: the sequence tests nothing of HeldKeys")
			}
			if g := s.c.stats.ParkedRecords.Load(); g != 0 {
				t.Fatalf("after a reset the ParkedRecords gauge is %d, want 0", g)
			}
		})
	}
}
