package engine

import (
	"bytes"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/offsetmap"
	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/flow"
)

// These tests try to break out-of-order commits (progress.go) with the
// broker-free core rig (core_test.go, progress_test.go).

// drain answers every delivery in rs, and those the answers begin, with
// answer(r) (nil: acknowledged), and returns every delivery it answered,
// in the order they began.
func (g *rig) drain(rs []*result, answer func(*result) error) []*result {
	var all []*result
	for len(rs) > 0 {
		r := rs[0]
		rs = rs[1:]
		all = append(all, r)
		rs = append(rs, g.answer(r, answer(r))...)
	}
	return all
}

// deliveredOffsets lists the source offsets of the deliveries of key k in
// rs, in order.
func deliveredOffsets(rs []*result, k string) []int64 {
	var os []int64
	for _, r := range rs {
		if string(r.msg.Key) == k {
			os = append(os, r.msg.Offset)
		}
	}
	return os
}

// TestBreakProgressHeldHeadOfASpillKeepsItsKeysOrder: key k's first record
// is slow, so the records waiting behind it spill to parking (their park
// moves wait for it: queue.behind). Its delivery then fails while the
// overload breaker is open: the attempt does not count (Hold) and the
// record goes back to the head of its lane, no longer running. A record of
// k fetched now is parked too, but with no record to wait behind: its park
// move is written at once, ahead of the spilled ones, and the key is
// released in parking-topic order. The app must see k's records in source
// order (DESIGN.md invariant 3).
func TestBreakProgressHeldHeadOfASpillKeepsItsKeysOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := overload.New(overload.Config{
			Breaker:     overload.BreakerConfig{Enabled: true, Window: 4, FailureRatio: 0.5, Wait: 200 * time.Millisecond, MaxWait: time.Second, Probes: 1},
			MaxInFlight: 64,
		})
		g := newRig(t, flow.OrderingKey, func(o *Options) { o.Overload = gate })
		g.source("k", "k", "x", "y") // offsets 0 1 2 3
		rs := g.dispatch()
		if got := keys(rs); !slices.Equal(got, []string{"k", "x", "y"}) {
			t.Fatalf("began %q, want [k x y]", got)
		}
		var log []*result
		log = append(log, rs...)
		time.Sleep(2 * spillAfter)
		g.dispatch() // k's record 1 spills behind record 0
		if n := g.c.shards[0].parkedCount(); n != 1 {
			t.Fatalf("parkedCount %d after the spill, want 1", n)
		}
		// Two keys fail: the breaker opens (y's failure is held), then k's
		// record 0, admitted before, fails while it is open: held too.
		g.answer(rs[1], e503)
		g.answer(rs[2], e503)
		g.answer(rs[0], e503)
		if s := gate.Snapshot(time.Now()); s.Held < 2 {
			t.Fatalf("the breaker held %d deliveries, want 2 (y and k's record 0): %+v", s.Held, s)
		}
		if en := g.c.shards[0].src.entries[0]; en.settled || !en.held {
			t.Fatalf("k's record 0: settled %v held %v, want held and not settled", en.settled, en.held)
		}
		// The source resumes a little before the breaker probes (records
		// to probe with); k's head is still held, and k's next record is
		// fetched.
		for gate.Paused(time.Now(), false) {
			time.Sleep(5 * time.Millisecond)
		}
		if _, ok := gate.Admit(time.Now(), false, 0); ok {
			t.Fatal("the breaker admits a delivery as soon as the source resumes; the test needs the window before")
		}
		g.source("k") // offset 4
		tx := g.commit()
		t.Logf("moves while k's head is held: %q", moved(tx))

		// The breaker probes; everything succeeds from now on.
		for i := 0; i < 100; i++ {
			time.Sleep(50 * time.Millisecond)
			log = append(log, g.drain(g.dispatch(), func(*result) error { return nil })...)
			g.commit()
		}
		got := deliveredOffsets(log, "k")
		t.Logf("k delivered at source offsets %v", got)
		if !slices.IsSorted(got) || !slices.Contains(got, 4) || !slices.Contains(got, 1) {
			t.Fatalf("the app saw key k's records at source offsets %v, want 0 (and its retries) then 1 then 4: order per key broken", got)
		}
	})
}

// TestBreakProgressStuckParkRecordKeepsItsKeysOrder: a record of a blocked
// key that does not fit the parking topic is held unsettled (Stats.Stuck;
// "never lost, never committed past"). The prefix rule held every later
// record behind it; out of order, the key's next record is parked, written
// and released once the head succeeds: the app sees it before the stuck
// record, which a restart (max.message.bytes raised) then delivers after
// it (DESIGN.md invariant 3).
func TestBreakProgressStuckParkRecordKeepsItsKeysOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(t, flow.OrderingKey, nil)
		g.c.topics.MaxBytes = map[string]int{g.c.opts.ParkingTopic: 2000}
		g.source("k") // offset 0: the head
		var log []*result
		rs := g.dispatch()
		log = append(log, rs...)
		g.answer(rs[0], e503)
		g.commit()                                                                                            // the head is in its tier
		g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte("k"), Value: bytes.Repeat([]byte("x"), 5000)}) // offset 1: too large to park
		if n := g.c.stats.Stuck.Load(); n != 1 {
			t.Fatalf("Stuck %d, want 1 (the big record)", n)
		}
		g.source("k") // offset 2
		g.commit()
		time.Sleep(2 * time.Minute) // the head is due
		for range 3 {
			log = append(log, g.drain(g.dispatch(), func(*result) error { return nil })...)
			g.commit()
		}
		got := deliveredOffsets(log, "k")
		if slices.Contains(got, 2) && !slices.Contains(got, 1) {
			t.Fatalf("k delivered at source offsets %v: offset 2 reached the app while offset 1 (stuck, too large to park) never did; it comes after 2 once max.message.bytes is raised and kretry restarts", got)
		}
	})
}

// TestBreakProgressInheritedMapStaysWithinKafkasLimit: a predecessor read
// 4000 records of two keys, alternating, and committed while nearly all of
// them were pending (one pending run). The next owner delivers the fast
// key's records while the slow key's first record is in delivery: each
// one splits the inherited pending run, and the inherited pending records
// are listed "whatever the budget". The metadata must stay within Kafka's
// offset.metadata.max.bytes (4096 by default): past it the TxnOffsetCommit
// is refused (OFFSET_METADATA_TOO_LARGE), the transaction aborts, and the
// engine restarts from the same map, again and again.
func TestBreakProgressInheritedMapStaysWithinKafkasLimit(t *testing.T) {
	g := newRig(t, flow.OrderingNone, nil)
	var ks []string
	for i := range 4000 {
		ks = append(ks, []string{"slow", "fast"}[i%2])
	}
	g.source(ks...)
	rs := g.dispatch()
	g.answer(rs[1], nil) // one fast record done, the rest pending
	tx := g.commit()
	cp := tx.offsets["orders"][0]
	t.Logf("the predecessor commits %d with %d bytes of metadata", cp.Offset, len(cp.Meta))

	g.restart(nil) // or a reset: the engine reads back its own map
	rs = g.dispatch()
	var slow *result
	var fast []*result
	for _, r := range rs {
		if string(r.msg.Key) == "slow" {
			slow = r
		} else {
			fast = append(fast, r)
		}
	}
	if slow == nil {
		t.Fatal("the slow key's first record did not begin")
	}
	g.drain(fast, func(*result) error { return nil })
	tx = g.commit()
	cp = tx.offsets["orders"][0]
	m, err := offsetmap.Decode(cp.Offset, cp.Meta)
	t.Logf("the next owner commits %d with %d bytes of metadata (%d pending runs, err %v), %d records let go of", cp.Offset, len(cp.Meta), len(m.Pending), err, tx.records)
	if len(cp.Meta) > 4096 {
		t.Fatalf("commit metadata of %d bytes: Kafka refuses more than offset.metadata.max.bytes (4096 by default) and the transaction aborts; the budget is %d", len(cp.Meta), offsetmap.DefaultBudget)
	}
	if len(cp.Meta) > offsetmap.DefaultBudget {
		t.Fatalf("commit metadata of %d bytes, past the budget of %d", len(cp.Meta), offsetmap.DefaultBudget)
	}
}
