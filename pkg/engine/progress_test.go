package engine

import (
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/offsetmap"
	"github.com/kretry/kretry/pkg/flow"
)

// These tests drive the core through out-of-order commits (progress.go):
// a record that has not settled holds back its own offset, not the moves
// of the records after it, and the next owner skips what the commit's
// metadata says is done.

// restart hands the partition to a new core, as a restart or a rebalance
// does: it is assigned, its OffsetFetch answers the group's commits (the
// old core's last), and it reads every stage from its committed offset.
func (g *rig) restart(tune func(*Options)) {
	g.t.Helper()
	old := g.c
	o := old.opts
	if tune != nil {
		tune(&o)
	}
	g.c = newTestCore(g.t, o)
	g.restarts++
	g.c.instanceTag = fmt.Sprintf("restart%d", g.restarts) // its own barrier nonces
	g.c.assign(map[string][]int32{g.c.plan.Source: {0}})
	g.c.offsetsFetched(old.commits)
	for topic, log := range g.logs {
		from := int64(0)
		if cp, ok := old.commits[topic][0]; ok {
			from = cp.Offset
		}
		for _, r := range log {
			if r.Offset >= from {
				f := *r
				g.c.ingest([]*kgo.Record{&f})
			}
		}
	}
	if sh := g.c.shards[0]; sh != nil && sh.restoring {
		g.commit() // the barrier, read back
	}
}

// offsetsOf lists the source offsets of rs.
func offsetsOf(rs []*result) []int64 {
	var os []int64
	for _, r := range rs {
		os = append(os, r.msg.Offset)
	}
	return os
}

// TestCoreCommitsPastASlowRecord: while the first record is in delivery,
// the records after it that settled are moved and let go of at the next
// transaction, which commits the first record's offset with metadata
// naming it pending; the old prefix rule wrote no move until it settled.
func TestCoreCommitsPastASlowRecord(t *testing.T) {
	g := newRig(t, flow.OrderingNone, nil)
	g.source("slow", "fails", "ok")
	rs := g.dispatch()
	g.answer(rs[1], e503)
	g.answer(rs[2], nil)
	tx := g.commit()
	if tx == nil {
		t.Fatal("no transaction while a later record's move waits")
	}
	if got := moved(tx); !slices.Equal(got, []string{"retry:orders.retry.1m:fails"}) {
		t.Fatalf("moves %q, want the failed record's retry while the first is in delivery", got)
	}
	cp := tx.offsets["orders"][0]
	if cp.Offset != 0 {
		t.Fatalf("commits orders/0 at %d, want 0 (the first record is in delivery)", cp.Offset)
	}
	m, err := offsetmap.Decode(cp.Offset, cp.Meta)
	if err != nil || m.Done(0) || !m.Done(1) || !m.Done(2) || m.Done(3) {
		t.Fatalf("metadata %q (%+v, %v): want offsets 1 and 2 done, 0 pending", cp.Meta, m, err)
	}
	if n := len(g.c.shards[0].src.entries); n != 1 {
		t.Fatalf("the source queue holds %d entries, want 1 (the slow record)", n)
	}
	g.answer(rs[0], nil)
	tx = g.commit()
	if cp := tx.offsets["orders"][0]; cp.Offset != 3 || cp.Meta != "" {
		t.Fatalf("once the first record is done, commits %d %q, want 3 and no metadata", cp.Offset, cp.Meta)
	}
}

// TestCoreSkipsWhatTheCommitSaysIsDone: the next owner delivers the
// pending record again, skips the done ones (no second move, no second
// delivery) and delivers the retry from its tier.
func TestCoreSkipsWhatTheCommitSaysIsDone(t *testing.T) {
	g := newRig(t, flow.OrderingNone, nil)
	g.source("slow", "fails", "ok")
	rs := g.dispatch()
	g.answer(rs[1], e503)
	g.answer(rs[2], nil)
	g.commit()

	g.restart(nil)
	again := g.dispatch()
	if got := offsetsOf(again); !slices.Equal(got, []int64{0}) || again[0].msg.Topic != "orders" {
		t.Fatalf("the next owner began %v, want only orders offset 0 (1 and 2 are done)", got)
	}
	g.answer(again[0], nil)
	tx := g.commit()
	if len(tx.moves) != 0 {
		t.Fatalf("moves %q, want none: the failed record moved before the restart", moved(tx))
	}
	if cp := tx.offsets["orders"][0]; cp.Offset != 3 {
		t.Fatalf("commits orders/0 at %d, want 3", cp.Offset)
	}
	if n := len(g.logs["orders.retry.1m"]); n != 1 {
		t.Fatalf("the tier holds %d records, want 1", n)
	}
}

// TestCoreRecommitsAfterAResetFromItsOwnCommit: a reset with no rebalance
// (a transaction that failed) reads again from the engine's own last
// commit, whose map it keeps: done records are not delivered again.
func TestCoreRecommitsAfterAResetFromItsOwnCommit(t *testing.T) {
	g := newRig(t, flow.OrderingNone, nil)
	g.source("slow", "a", "b")
	rs := g.dispatch()
	g.answer(rs[1], nil)
	g.answer(rs[2], nil)
	g.commit()
	g.c.reset()
	for _, r := range g.logs["orders"] {
		f := *r
		g.c.ingest([]*kgo.Record{&f})
	}
	if got := offsetsOf(g.dispatch()); !slices.Equal(got, []int64{0}) {
		t.Fatalf("after the reset began %v, want only offset 0", got)
	}
	// The partition's commit, with its map, is written again even before
	// its records are read back (keepCommits).
	h := newRig(t, flow.OrderingNone, nil)
	h.source("slow", "a")
	hr := h.dispatch()
	h.answer(hr[1], nil)
	h.commit()
	h.c.reset()
	h.c.loose = append(h.c.loose, move{rec: h.c.opRecord(0, []byte("x"), opSettle, "0")})
	tx := h.c.prepare()
	if cp, ok := tx.offsets["orders"][0]; !ok || cp.Offset != 0 || cp.Meta == "" {
		t.Fatalf("a transaction after the reset commits orders/0 as %+v (%v), want offset 0 with its map", cp, ok)
	}
}

// TestCoreSpilledRecordsWaitForTheirHead: records of a slow key parked by
// a spill are not written to the parking topic before the slow record's
// own outcome: a restart would otherwise release them ahead of it.
func TestCoreSpilledRecordsWaitForTheirHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRig(t, flow.OrderingKey, nil)
		g.source("k", "k", "k", "j")
		rs := g.dispatch()
		if got := keys(rs); !slices.Equal(got, []string{"k", "j"}) {
			t.Fatalf("began %q, want [k j]", got)
		}
		g.answer(rs[1], nil)
		time.Sleep(2 * spillAfter)
		g.dispatch() // spills k's waiting records
		if n := g.c.shards[0].parkedCount(); n != 2 {
			t.Fatalf("parkedCount %d after the spill, want 2", n)
		}
		tx := g.commit()
		if got := moved(tx); len(got) != 0 {
			t.Fatalf("moves %q while k's first record is in delivery, want none", got)
		}
		if cp := tx.offsets["orders"][0]; cp.Offset != 0 {
			t.Fatalf("commits orders/0 at %d, want 0", cp.Offset)
		}
		g.answer(rs[0], nil)
		tx = g.commit()
		want := []string{"park:orders.parking:k", "park:orders.parking:k"}
		if got := moved(tx); !slices.Equal(got, want) {
			t.Fatalf("moves %q once k's first record is done, want %q", got, want)
		}
		if cp := tx.offsets["orders"][0]; cp.Offset != 4 {
			t.Fatalf("commits orders/0 at %d, want 4", cp.Offset)
		}
	})
}

// TestCoreKeepsItsMetadataWithinBudget: past the budget, settled records
// after the last pending one that fits stay in memory, unmoved, and go once
// the records before them are done; what an inherited map lists as pending
// is listed again whatever the budget.
func TestCoreKeepsItsMetadataWithinBudget(t *testing.T) {
	const budget = 40 // prefix and two varints: room for a few runs
	g := newRig(t, flow.OrderingNone, func(o *Options) { o.commitMetaBudget = budget; o.MaxInFlight = 100 })
	var ks []string
	for i := range 40 {
		ks = append(ks, string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	g.source(ks...)
	rs := g.dispatch()
	// Even offsets stay in delivery; odd ones fail into the tier.
	for i := 1; i < len(rs); i += 2 {
		g.answer(rs[i], e503)
	}
	tx := g.commit()
	cp := tx.offsets["orders"][0]
	if len(cp.Meta) > budget {
		t.Fatalf("metadata of %d bytes, budget %d", len(cp.Meta), budget)
	}
	m, err := offsetmap.Decode(cp.Offset, cp.Meta)
	if err != nil {
		t.Fatal(err)
	}
	n := len(tx.moves)
	if n == 0 || n >= 20 {
		t.Fatalf("%d moves, want some but not all 20 (the budget cuts)", n)
	}
	for o := int64(1); o < 40; o += 2 {
		moved := o < int64(2*n)
		if m.Done(o) != moved {
			t.Fatalf("offset %d: done %v in the map, moved %v", o, m.Done(o), moved)
		}
	}
	for i := 0; i < len(rs); i += 2 {
		g.answer(rs[i], nil)
	}
	tx = g.commit()
	if got := len(tx.moves); got != 20-n {
		t.Fatalf("%d moves once every record settled, want the other %d", got, 20-n)
	}
	if cp := tx.offsets["orders"][0]; cp.Offset != 40 || cp.Meta != "" {
		t.Fatalf("commits %d %q, want 40 and no metadata", cp.Offset, cp.Meta)
	}
}
