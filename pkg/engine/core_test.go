package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// These tests drive the state core (core.go) through its own events and
// effects, with no broker and no goroutine: records fetched (read),
// deliveries begun (dispatch, startReady), their results (answer), the
// transaction (commit, which reads what it wrote back as the broker would
// return it) and the pauses for the client (takePauses).

// rig is one partition (0) of a source with two tiers and a DLQ.
type rig struct {
	t        *testing.T
	c        *core
	logs     map[string][]*kgo.Record // every record written, per topic
	restarts int                      // restart's count, for its cores' instance tags
}

func newRig(t *testing.T, ordering flow.Ordering, tune func(*Options)) *rig {
	t.Helper()
	src := "orders"
	plan := retrytopics.Plan{Source: src, DLQ: retrytopics.DLQTopic(src), Tiers: []retrytopics.Tier{
		{Topic: retrytopics.TierTopic(src, time.Minute), Delay: time.Minute},
		{Topic: retrytopics.TierTopic(src, 10*time.Minute), Delay: 10 * time.Minute},
	}}
	o := Options{Brokers: []string{"unused"}, Plan: plan, Group: "g", Deliverer: delivery.HandlerFunc(nil), Ordering: ordering}
	if ordering.Parks() {
		o.ParkingTopic = retrytopics.ParkingTopic(src)
	}
	if tune != nil {
		tune(&o)
	}
	c := newTestCore(t, o)
	g := &rig{t: t, c: c, logs: map[string][]*kgo.Record{}}
	c.assign(map[string][]int32{src: {0}})
	c.offsetsFetched(groupCommits{})
	if sh := c.shards[0]; sh.restoring {
		g.commit() // the barrier, read back: the parking partition is replayed
		if sh.restoring {
			t.Fatal("the shard did not finish restoring at its barrier")
		}
	}
	return g
}

// newTestCore is a core with the options o (defaults set) and no broker.
func newTestCore(t *testing.T, o Options) *core {
	t.Helper()
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	c := &core{opts: o, plan: o.Plan, log: slog.New(slog.NewTextHandler(io.Discard, nil)), obs: nopObserver{},
		shards: map[int32]*shard{}, commits: groupCommits{}, topics: &retrytopics.Topics{}, hard: context.Background()}
	c.stats.Retried = make([]atomic.Int64, len(o.Plan.Tiers))
	return c
}

// read writes r at the end of its topic, partition 0, and ingests it.
func (g *rig) read(r *kgo.Record) {
	c := *r
	c.Partition, c.Offset = 0, int64(len(g.logs[r.Topic]))
	g.logs[r.Topic] = append(g.logs[r.Topic], &c)
	f := c // what the client returns is not what the test keeps
	g.c.ingest([]*kgo.Record{&f})
}

// source reads records of the given keys on the source.
func (g *rig) source(keys ...string) {
	for _, k := range keys {
		g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte(k), Value: []byte("v-" + k)})
	}
}

// dispatch is the loop's turn: the deliveries it begins.
func (g *rig) dispatch() []*result { return slices.Clone(g.c.dispatch(time.Now())) }

// answer feeds r's result and returns the deliveries the freed slot begins.
func (g *rig) answer(r *result, err error) []*result {
	r.err = err
	g.c.apply(r)
	return slices.Clone(g.c.startReady())
}

// commit runs the next transaction as committed and reads back what it
// wrote to the tiers and the parking topic; nil when nothing was due.
func (g *rig) commit() *txn {
	tx := g.c.prepare()
	if tx == nil {
		return nil
	}
	g.c.committed(tx)
	for _, m := range tx.moves {
		if m.rec.Topic != g.c.plan.DLQ {
			g.read(m.rec)
		}
	}
	return tx
}

// keys are the keys of rs, in order.
func keys(rs []*result) []string {
	var ks []string
	for _, r := range rs {
		ks = append(ks, string(r.msg.Key))
	}
	return ks
}

// moved lists tx's moves as "kind:topic:key" (op records as "op:topic").
func moved(tx *txn) []string {
	var ms []string
	for _, m := range tx.moves {
		if m.ev.Kind == "" {
			ms = append(ms, "op:"+m.rec.Topic)
			continue
		}
		ms = append(ms, fmt.Sprintf("%s:%s:%s", m.ev.Kind, m.rec.Topic, m.rec.Key))
	}
	return ms
}

// TestCoreRoutesOneRecord follows one record through each first outcome:
// the transaction carries its move (or none) and commits the source past
// it.
func TestCoreRoutesOneRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer error
		moves  []string
		class  string
	}{
		{"success", nil, nil, ""},
		{"transient: the first tier", e503, []string{"retry:orders.retry.1m:k"}, "transient"},
		{"permanent: the DLQ", e422, []string{"dead-letter:orders.dlq:k"}, "permanent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, flow.OrderingNone, nil)
			g.source("k")
			rs := g.dispatch()
			if len(rs) != 1 || rs[0].msg.ID == "" || rs[0].msg.Attempt != 1 {
				t.Fatalf("dispatch began %d deliveries (%+v), want the record's first attempt", len(rs), rs)
			}
			g.answer(rs[0], tc.answer)
			tx := g.commit()
			if tx == nil {
				t.Fatal("no transaction after a settled record")
			}
			if got := moved(tx); !slices.Equal(got, tc.moves) {
				t.Errorf("moves %q, want %q", got, tc.moves)
			}
			if o := tx.offsets["orders"][0]; o.Offset != 1 {
				t.Errorf("commits orders/0 at %d, want 1 (past the record)", o.Offset)
			}
			if tc.class != "" {
				if got, _ := header(tx.moves[0].rec, retrytopics.HeaderErrorClass); got != tc.class {
					t.Errorf("%s = %q, want %q", retrytopics.HeaderErrorClass, got, tc.class)
				}
			}
		})
	}
}

// TestCoreOrdersAKeyBehindItsRetry: with ordering key a later record of a
// key whose record is retrying is parked, other keys are delivered, and
// the parked record is delivered once the head succeeds from its tier;
// with ordering none the later record is delivered at once.
func TestCoreOrdersAKeyBehindItsRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(t, flow.OrderingKey, nil)
		g.source("k")
		head := g.dispatch()
		g.answer(head[0], e503)
		g.source("k", "j")
		if got := keys(g.dispatch()); !slices.Equal(got, []string{"j"}) {
			t.Fatalf("began %q behind a retrying key, want only [j]", got)
		}
		tx := g.commit()
		want := []string{"retry:orders.retry.1m:k", "park:orders.parking:k"}
		if got := moved(tx); !slices.Contains(got, want[0]) || !slices.Contains(got, want[1]) {
			t.Fatalf("moves %q, want the head's retry and the later record's park among them", got)
		}
		if g.c.shards[0].parkedCount() != 1 {
			t.Fatalf("parkedCount %d, want 1", g.c.shards[0].parkedCount())
		}

		time.Sleep(2 * time.Minute) // the tier record is due
		retry := g.dispatch()
		if len(retry) != 1 || retry[0].msg.Attempt != 2 || string(retry[0].msg.Key) != "k" {
			t.Fatalf("after the tier's delay began %+v, want k's second attempt", retry)
		}
		// The head's success releases the parked record into the slot it
		// frees.
		released := g.answer(retry[0], nil)
		if got := keys(released); !slices.Equal(got, []string{"k"}) || released[0].msg.Offset != 1 {
			t.Fatalf("after the head succeeded began %+v, want k's parked record (source offset 1)", released)
		}
		g.answer(released[0], nil)
		tx = g.commit()
		if got := moved(tx); !slices.Contains(got, "op:orders.parking") {
			t.Fatalf("moves %q, want the key's release and unblock ops on the parking topic", got)
		}
		if g.c.shards[0].parkedCount() != 0 || g.c.shards[0].blockedCount() != 0 {
			t.Fatalf("after the release parkedCount %d blockedCount %d, want 0 0", g.c.shards[0].parkedCount(), g.c.shards[0].blockedCount())
		}
	})

	g := newRig(t, flow.OrderingNone, nil)
	g.source("k")
	g.answer(g.dispatch()[0], e503)
	g.source("k")
	if got := keys(g.dispatch()); !slices.Equal(got, []string{"k"}) {
		t.Fatalf("ordering none began %q, want the later record of k at once", got)
	}
}

// TestCoreKeepsInFlightBounds: dispatch begins at most MaxInFlight
// deliveries, and each answer frees one slot for the next record.
func TestCoreKeepsInFlightBounds(t *testing.T) {
	g := newRig(t, flow.OrderingNone, func(o *Options) { o.MaxInFlight = 2 })
	g.source("a", "b", "c", "d", "e")
	rs := g.dispatch()
	if got := keys(rs); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("began %q, want [a b] (MaxInFlight 2)", got)
	}
	next := g.answer(rs[0], nil)
	if got := keys(next); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("an answer freed one slot and began %q, want [c]", got)
	}
	if g.c.inflight != 2 {
		t.Fatalf("inflight %d, want 2", g.c.inflight)
	}
	// The commit stops at the first record not settled: b.
	if o := g.commit().offsets["orders"][0]; o.Offset != 1 {
		t.Fatalf("commits orders/0 at %d, want 1 (b is still in flight)", o.Offset)
	}
}

// TestCorePausesATierUntilDue: a tier record not yet due pauses its
// partition (an effect for the client), wakes the loop at its due time
// (nextDue), and resumes the partition when it is delivered.
func TestCorePausesATierUntilDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(t, flow.OrderingNone, nil)
		g.c.takePauses()
		g.source("k")
		g.answer(g.dispatch()[0], e503)
		g.c.takeWake()
		g.commit() // the retry is read back from the tier, not yet due
		tier := g.c.plan.Tiers[0].Topic
		g.dispatch()
		pause, resume, _ := g.c.takePauses()
		if !slices.Equal(pause[tier], []int32{0}) || len(resume) != 0 {
			t.Fatalf("pauses %v resumes %v, want %s/0 paused", pause, resume, tier)
		}
		if !g.c.takeWake() {
			t.Fatal("a pause decided did not ask the shell to wake the loop")
		}
		// The loop wakes tierLead before the record is due, to resume the
		// tier so that the records behind it are fetched by their due time.
		wake, ok := g.c.nextDue()
		lead := g.c.tierLead()
		if !ok || wake.Before(time.Now().Add(time.Minute-lead)) || wake.After(time.Now().Add(2*time.Minute)) {
			t.Fatalf("nextDue %v (%v), want about a minute from now (the tier's delay and its jitter, less %v)", wake, ok, lead)
		}
		time.Sleep(time.Until(wake))
		if rs := g.dispatch(); len(rs) != 0 {
			t.Fatalf("%v before the due time began %d deliveries, want none", lead, len(rs))
		}
		pause, resume, _ = g.c.takePauses()
		if !slices.Equal(resume[tier], []int32{0}) || len(pause) != 0 {
			t.Fatalf("pauses %v resumes %v, want %s/0 resumed %v before its record is due", pause, resume, tier, lead)
		}
		due, _ := g.c.nextDue()
		if !due.Equal(wake.Add(lead)) {
			t.Fatalf("once resumed, nextDue %v, want the due time %v", due, wake.Add(lead))
		}
		time.Sleep(time.Until(due))
		if rs := g.dispatch(); len(rs) != 1 {
			t.Fatalf("at the due time began %d deliveries, want the retry", len(rs))
		}
	})
}

// TestCoreResetDropsResultsInFlight: a reset (rebalance, failed
// transaction) drops the state; a result that arrives after it is ignored,
// and the partitions the client has paused are handed back for resuming.
func TestCoreResetDropsResultsInFlight(t *testing.T) {
	g := newRig(t, flow.OrderingNone, func(o *Options) { o.MaxPending = 2 })
	g.source("a", "b")
	rs := g.dispatch()
	g.c.takePauses() // the source is full: paused, as the client was told
	g.c.reset()
	g.answer(rs[0], e422)
	if n := g.c.stats.Failed.Load(); n != 0 {
		t.Fatalf("a result of a dropped generation was routed (Failed = %d)", n)
	}
	if g.c.prepare() != nil {
		t.Fatal("a result of a dropped generation reached a transaction")
	}
	_, _, dropped := g.c.takePauses()
	if !slices.Equal(dropped["orders"], []int32{0}) {
		t.Fatalf("dropped %v, want orders/0 handed back for resuming", dropped)
	}
}

// TestCoreStartsADueRetryWhenASlotFrees: a retry that falls due while the
// loop is busy (a transaction in flight) is started by the next delivery
// to end, not at the loop's next turn.
func TestCoreStartsADueRetryWhenASlotFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(t, flow.OrderingNone, nil)
		g.source("k")
		g.answer(g.dispatch()[0], e503)
		g.commit() // the retry is read back from the tier, due in a minute
		g.source("j")
		busy := g.dispatch()
		if got := keys(busy); !slices.Equal(got, []string{"j"}) {
			t.Fatalf("began %q, want [j]", got)
		}
		time.Sleep(2 * time.Minute)
		next := g.answer(busy[0], nil) // no dispatch: the loop is elsewhere
		if len(next) != 1 || string(next[0].msg.Key) != "k" || next[0].msg.Attempt != 2 {
			t.Fatalf("the end of j's delivery began %+v, want k's due retry", next)
		}
	})
}

// TestCoreWritesRetriesInDueOrder: a tier partition hands out its records
// in offset order, each once due, so a transaction writes its retries in
// due order, not in the order their records were read: b failed first and
// is delivered again at its own due time, not behind a, which failed ten
// seconds after it. The dead-letter move keeps its slot.
func TestCoreWritesRetriesInDueOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(t, flow.OrderingNone, nil)
		g.source("a", "b", "c")
		rs := g.dispatch()
		if got := keys(rs); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("began %q, want [a b c]", got)
		}
		g.answer(rs[1], e503)
		g.answer(rs[2], delivery.Permanent(errors.New("bad")))
		time.Sleep(10 * time.Second)
		g.answer(rs[0], e503)
		tx := g.commit()
		tier := g.c.plan.Tiers[0].Topic
		want := []string{"retry:" + tier + ":b", "retry:" + tier + ":a", "dead-letter:" + g.c.plan.DLQ + ":c"}
		if got := moved(tx); !slices.Equal(got, want) {
			t.Fatalf("the transaction wrote %q, want %q", got, want)
		}
		time.Sleep(50 * time.Second) // b's retry is due, a's in ten seconds
		if got := keys(g.dispatch()); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("at b's due time began %q, want [b]", got)
		}
	})
}

// TestCorePollWaitsUntilTheNextTransaction: the loop's poll waits until
// the transaction due CommitInterval after the last, not a whole interval
// from the poll's start, and less when a waiting tier resumes first.
func TestCorePollWaitsUntilTheNextTransaction(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(t, flow.OrderingNone, func(o *Options) { o.CommitInterval = 100 * time.Millisecond })
		g.commit()
		time.Sleep(90 * time.Millisecond)
		if got := g.c.pollWait(time.Now()); got != 10*time.Millisecond {
			t.Fatalf("90ms after a transaction the poll waits %s, want 10ms", got)
		}
		time.Sleep(time.Second)
		if got := g.c.pollWait(time.Now()); got != time.Millisecond {
			t.Fatalf("with a transaction overdue the poll waits %s, want 1ms", got)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		g := newRig(t, flow.OrderingNone, func(o *Options) { o.CommitInterval = time.Hour })
		g.source("k")
		g.answer(g.dispatch()[0], e503)
		g.commit() // the retry is read back from the tier, due in a minute
		want := time.Minute - g.c.tierLead()
		if got := g.c.pollWait(time.Now()); got != want {
			t.Fatalf("with a retry due in a minute the poll waits %s, want %s (the tier resumes then)", got, want)
		}
	})
}

// TestCoreUnlistedErrorLogsNoStatusZero: a handler's plain error is
// transient with one WARN, which named "status=0" although there was no
// HTTP answer (found by a newcomer); an unlisted HTTP status is named.
func TestCoreUnlistedErrorLogsNoStatusZero(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		status bool
	}{
		{"a plain error", errors.New("plain error"), false},
		{"an unlisted status", &delivery.StatusError{Status: 418}, true},
	} {
		g := newRig(t, flow.OrderingNone, nil)
		var logged bytes.Buffer
		g.c.log = slog.New(slog.NewTextHandler(&logged, nil))
		g.source("k")
		g.answer(g.dispatch()[0], tc.err)
		line := logged.String()
		if !strings.Contains(line, "unlisted status or error") {
			t.Fatalf("%s: logged %q, want the unlisted WARN", tc.name, line)
		}
		if got := strings.Contains(line, "status="); got != tc.status || strings.Contains(line, "status=0") {
			t.Errorf("%s: logged %q; want a status attribute %v, never status=0", tc.name, line, tc.status)
		}
	}
}
