package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestoringSourceCountsTheReplayedParkedRecords: a partition moves
// while its blocked key has half a share parked and a share of the key's
// records waits in the source. The new owner replays the parked records,
// then takes the source's records into its backlog only up to the share
// less what it replayed (and one record past it, as a fetch does), so
// that, once the backlog's records of the blocked key park as the restore
// finishes, its parked records stay within the share. Counted apart, the
// backlog took its own whole share and the partition parked 2.1 times it
// (a breaker run).
func TestRestoringSourceCountsTheReplayedParkedRecords(t *testing.T) {
	g, bound := parkedShareRig(t, 1, 2)
	held := len("s") + len(value100K) + entryBytes
	for range bound / held { // a share of the key's records, not yet fetched
		g.waiting("s")
	}
	sh := g.restoreOnSuccessor()
	replayed := parkedBytes(sh)
	if !sh.restoring || replayed < bound/2 {
		t.Fatalf("restoring %v with %d KiB replayed; want a restore of half the %d KiB share", sh.restoring, replayed>>10, bound>>10)
	}
	if !sh.src.paused || replayed+sh.backlogBytes > bound+held {
		t.Fatalf("the restoring source took %d KiB beside %d KiB replayed (paused %v); want it paused at the %d KiB share",
			sh.backlogBytes>>10, replayed>>10, sh.src.paused, bound>>10)
	}
	g.commit() // the barrier, read back: the backlog's records park
	if sh.restoring {
		t.Fatal("still restoring after the barrier was read back")
	}
	if got := parkedBytes(sh); got > bound+held {
		t.Fatalf("%d KiB parked or on their way after the restore, %.2f times the %d KiB share", got>>10, float64(got)/float64(bound), bound>>10)
	}
}

// TestRestorePauseEndsWithTheRestore: a restore that paused its source
// (its backlog and the replayed parked records reached the share) lets it
// go once the backlog is taken, with less than the share parked. The park
// bound read its hysteresis off the source's pause, any pause: it kept the
// source paused at half the share, so other keys of the partition waited
// for the blocked key to unblock (29.1s on Kafka, a breaker run).
func TestRestorePauseEndsWithTheRestore(t *testing.T) {
	g, bound := parkedShareRig(t, 6, 10)
	for i := range bound / 2 / len(value100K) { // half a share of other keys
		g.waiting(fmt.Sprintf("a%d", i))
	}
	sh := g.restoreOnSuccessor()
	if !sh.src.paused {
		t.Fatal("the restore did not pause its source at the share; the test needs it paused")
	}
	g.commit() // the barrier, read back
	for range 5 {
		for _, r := range g.dispatch() {
			g.answer(r, nil)
		}
		g.commit()
	}
	g.c.updatePauses(sh, time.Now())
	if sh.src.paused {
		t.Fatalf("the source is still paused with %d records held and %d KiB parked, under the %d KiB share",
			len(sh.src.entries), parkedBytes(sh)>>10, bound>>10)
	}
}

// value100K is the value of the records these tests park.
var value100K = make([]byte, 100<<10)

// parkedShareRig is a blockedKeyRig on four partitions (a 16 MiB share
// each) whose key "s" has parked records of 100 KiB, read back, up to
// num/den of the share. It returns the share in bytes.
func parkedShareRig(t *testing.T, num, den int) (*rig, int) {
	t.Helper()
	g, sh := blockedKeyRig(t)
	for p := int32(1); p < 4; p++ {
		g.c.shardFor(p)
	}
	bound := g.c.byteBound()
	for parkedBytes(sh) < bound*num/den {
		g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte("s"), Value: value100K})
		g.dispatch()
		g.commit() // the park move, read back
	}
	g.commit()
	return g, bound
}

// waiting appends a record of key to the source partition's log, written
// and not yet fetched.
func (g *rig) waiting(key string) {
	src := g.c.plan.Source
	g.logs[src] = append(g.logs[src], &kgo.Record{Topic: src, Key: []byte(key), Value: value100K, Offset: int64(len(g.logs[src]))})
}

// restoreOnSuccessor hands the four partitions to a new core, whose fetch
// answers the parking partition first, then the source up to its pause
// (a paused partition is left out of the next fetch), and returns
// partition 0's shard, restoring until its barrier is read back.
func (g *rig) restoreOnSuccessor() *shard {
	g.t.Helper()
	old := g.c
	g.c = newTestCore(g.t, old.opts)
	g.c.instanceTag = "successor"
	g.c.assign(map[string][]int32{g.c.plan.Source: {0, 1, 2, 3}})
	g.c.offsetsFetched(old.commits)
	sh := g.c.shards[0]
	for _, topic := range []string{g.c.opts.ParkingTopic, g.c.plan.Source} {
		for _, r := range g.logs[topic] {
			if r.Offset < old.commits[topic][0].Offset || sh.src.paused {
				continue // committed before the move, or the source paused
			}
			f := *r
			g.c.ingest([]*kgo.Record{&f})
		}
	}
	return sh
}
