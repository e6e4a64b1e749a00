package engine

import (
	"errors"
	"fmt"
	"runtime"
	"sort"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// TestMaxPendingSharesTheBudget: left to its default, a partition pauses
// at its share of pendingBudget records (at least the floor) or of
// pendingBytes of the records it holds (at least floorBytes), whichever
// comes first, at one record however large; set, MaxPending is what it
// was set to, however many partitions and whatever the records' size.
func TestMaxPendingSharesTheBudget(t *testing.T) {
	held := func(size int) int { return size + entryBytes }
	cases := []struct {
		name       string
		maxPending int
		inFlight   int
		partitions int
		size       int // bytes of key and value of every record held
		want       int // records held when the partition pauses
	}{
		{"default, 1 partition", 0, 0, 1, 100, pendingBudget},
		{"default, 4 partitions", 0, 0, 4, 100, pendingBudget / 4},
		{"default, 16 partitions: the floor", 0, 0, 16, 100, 4096},
		{"default, 1000 partitions: the floor", 0, 0, 1000, 100, 4096},
		{"default, 32 × MaxInFlight above the share", 0, 1000, 4, 100, 32 * 1000},
		{"default, 1 KiB records on 4 partitions: 64 MiB", 0, 0, 4, 1024, (pendingBytes/4 + held(1024) - 1) / held(1024)},
		{"default, 10 KiB records on 1 partition: 64 MiB", 0, 0, 1, 10240, (pendingBytes + held(10240) - 1) / held(10240)},
		{"default, 100 KiB records on 1 partition: 64 MiB", 0, 0, 1, 102400, (pendingBytes + held(102400) - 1) / held(102400)},
		{"default, 100 KiB records on 1000 partitions: 16 MiB each", 0, 0, 1000, 102400, (floorBytes + held(102400) - 1) / held(102400)},
		{"default, 1 MiB records on 4 partitions: 16 MiB each", 0, 0, 4, 1 << 20, (floorBytes + held(1<<20) - 1) / held(1<<20)},
		{"default, 5 MiB records: 16 MiB", 0, 0, 4, 5 << 20, (floorBytes + held(5<<20) - 1) / held(5<<20)},
		{"default, a record over 16 MiB: one", 0, 0, 4, 20 << 20, 1},
		{"set", 200, 0, 4, 100, 200},
		{"set above the budgets", 100000, 0, 1, 102400, 100000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, flow.OrderingNone, func(o *Options) { o.MaxPending, o.MaxInFlight = tc.maxPending, tc.inFlight })
			ps := make([]int32, tc.partitions)
			for i := range ps {
				ps[i] = int32(i)
			}
			g.c.assign(map[string][]int32{g.c.plan.Source: ps})
			got := sort.Search(1<<20, func(n int) bool { return g.c.full(n, n*held(tc.size), false) })
			if got != tc.want {
				t.Fatalf("with %d partitions of %d-byte records, pauses at %d records, want %d", len(g.c.shards), tc.size, got, tc.want)
			}
			if resume := sort.Search(1<<20, func(n int) bool { return g.c.full(n, n*held(tc.size), true) }); resume > (tc.want+1)/2 || resume < tc.want/2-1 {
				t.Errorf("a paused partition resumes below %d records, want half of %d", resume, tc.want)
			}
		})
	}
}

// TestBytesAreEachPartitionsOwn: a partition of large records pauses at
// its own bytes, whatever the other partitions hold. With one mean record
// size for the instance (before), a busy partition of tiny records let a
// stuck partition of 20 KiB records hold 32,768 of them (640 MiB), far past
// the 4,096-record floor (found by a breaker run, 7 December).
func TestBytesAreEachPartitionsOwn(t *testing.T) {
	g := newRig(t, flow.OrderingNone, nil)
	g.c.assign(map[string][]int32{g.c.plan.Source: {0, 1}})
	big := make([]byte, 20<<10)
	offsets := map[int32]int64{}
	read := func(p int32, key, value []byte) {
		g.c.ingest([]*kgo.Record{{Topic: g.c.plan.Source, Partition: p, Offset: offsets[p], Key: key, Value: value}})
		offsets[p]++
	}
	src := func(p int32) *queue { return g.c.shards[p].src }
	for i := 0; i < 40000 && !src(1).paused; i++ {
		read(1, []byte(fmt.Sprint("b", i)), big)
		for j := range 50 { // tiny records, most of what the instance fetches
			read(0, []byte{'k'}, []byte{byte(j)})
		}
		g.c.updatePauses(g.c.shards[1], time.Now())
	}
	if n, want := len(src(1).entries), pendingBytes/2/(len(big)+entryBytes)+1; !src(1).paused || n > want {
		t.Errorf("the partition of 20 KiB records holds %d of them (%d MiB), paused %v; want it paused at its 32 MiB, %d", n, src(1).bytes>>20, src(1).paused, want)
	}
	if n, want := src(1).bytes, len(src(1).entries)*(len(big)+len("b1000")+entryBytes); n < want*99/100 || n > want*101/100 {
		t.Errorf("queue bytes %d, want about %d", n, want)
	}
}

// TestSourcePausesAtItsShare: with the default MaxPending, one assigned
// partition holds 5,000 fetched small records without pausing (its share
// is pendingBudget); MaxPending set to 4,096 pauses it, and so do records
// of 20 KiB, whose 64 MiB share is below the 4,096-record floor.
func TestSourcePausesAtItsShare(t *testing.T) {
	for _, tc := range []struct {
		maxPending int
		size       int
		paused     bool
	}{{0, 10, false}, {4096, 10, true}, {0, 20 << 10, true}} {
		t.Run(fmt.Sprintf("MaxPending %d, %d-byte values", tc.maxPending, tc.size), func(t *testing.T) {
			g := newRig(t, flow.OrderingNone, func(o *Options) { o.MaxPending = tc.maxPending })
			value := make([]byte, tc.size)
			for i := range 5000 {
				g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte(fmt.Sprint("k", i)), Value: value})
			}
			g.dispatch()
			pause, _, _ := g.c.takePauses()
			if got := len(pause[g.c.plan.Source]) == 1; got != tc.paused {
				t.Fatalf("holding 5,000 records the source paused: %v, want %v (pauses %v)", got, tc.paused, pause)
			}
		})
	}
}

// TestFullOfLargeRecordsCommitsAtHalf: a partition paused full of 100 KiB
// records holds a few hundred of them, far below the MaxPending/2 settled
// records that make a transaction due; it is due once half of what it
// holds settled, so it resumes without waiting out CommitInterval.
func TestFullOfLargeRecordsCommitsAtHalf(t *testing.T) {
	g := newRig(t, flow.OrderingNone, nil)
	value := make([]byte, 100<<10)
	for i := range 1000 {
		g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte(fmt.Sprint("k", i)), Value: value})
	}
	sh := g.c.shards[0]
	g.c.updatePauses(sh, time.Now())
	q := sh.src
	if !q.paused {
		t.Fatalf("holding %d records of 100 KiB (%d MiB) the source is not paused", len(q.entries), q.bytes>>20)
	}
	g.c.commitSoon, q.fresh = false, 0
	half := (len(q.entries) + 1) / 2
	for _, en := range q.entries[:half-1] {
		g.c.settle(en)
	}
	if g.c.commitSoon {
		t.Fatalf("a transaction is due after %d of %d records settled, want at half", half-1, len(q.entries))
	}
	g.c.settle(q.entries[half-1])
	if !g.c.commitSoon {
		t.Errorf("no transaction due after half (%d) of the %d records held settled", half, len(q.entries))
	}
}

// TestHeldBytesFollowTheEntries: through deliveries that succeed, fail
// transiently (a tier, the key blocked, its next records parked) and fail
// permanently (the DLQ), and the transactions that take them, every
// queue's bytes stay the sum of what its entries hold, and the source's
// fall to what it still holds (0 once all is taken).
func TestHeldBytesFollowTheEntries(t *testing.T) {
	g := newRig(t, flow.OrderingKey, nil)
	check := func(when string) {
		t.Helper()
		for p, sh := range g.c.shards {
			for _, q := range sh.order {
				sum := 0
				for _, en := range q.entries {
					sum += heldBytes(en)
				}
				if q.bytes != sum {
					t.Fatalf("%s: partition %d stage %d: queue bytes %d, its %d entries hold %d", when, p, q.stage, q.bytes, len(q.entries), sum)
				}
			}
		}
	}
	for i := range 300 {
		k := fmt.Sprint("k", i%40)
		g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte(k), Value: make([]byte, 10+i*37%4000)})
	}
	check("after reading")
	answer := func(r *result) error {
		switch r.en.rec.Offset % 10 {
		case 3:
			return delivery.Transient(errors.New("busy"))
		case 7:
			return delivery.Permanent(errors.New("bad"))
		}
		return nil
	}
	for round := range 5 {
		g.drain(g.dispatch(), answer)
		check(fmt.Sprint("round ", round, ", delivered"))
		g.commit()
		check(fmt.Sprint("round ", round, ", committed"))
	}
	if src := g.c.shards[0].src; len(src.entries) == 0 && src.bytes != 0 {
		t.Errorf("the source holds no entries but counts %d bytes", src.bytes)
	}
}

// TestParkedBytesPauseTheSource: parked records read back from the parking
// partition are held in memory until their key is released, counted
// before only by MaxParked (10,000 records, ~1 GB of 100 KiB records, a
// breaker run). The source that parks them pauses once they hold the
// partition's share of pendingBytes (64 MiB on one partition).
func TestParkedBytesPauseTheSource(t *testing.T) {
	g, sh := blockedKeyRig(t)
	value := make([]byte, 100<<10)
	const round = 100
	for range 20 {
		for range round {
			g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte("s"), Value: value})
		}
		if began := g.dispatch(); len(began) != 0 {
			t.Fatalf("began %d deliveries of a blocked key", len(began))
		}
		g.commit()
		g.c.updatePauses(sh, time.Now())
		if sh.src.paused {
			break
		}
	}
	parked := sh.park.bytes - len(sh.park.entries)*entryBytes
	if !sh.src.paused || parked < pendingBytes || parked > pendingBytes+round*len(value)+round*len("s") {
		t.Fatalf("source paused %v with %d records parked holding %d MiB; want it paused at 64 MiB parked", sh.src.paused, sh.parkedCount(), parked>>20)
	}
	if sh.parkedCount() >= g.c.opts.MaxParked {
		t.Fatalf("%d parked: the MaxParked bound paused it, not the bytes", sh.parkedCount())
	}
}

// blockedKeyRig is a rig, key ordering, whose key "s" is blocked: its
// next records park. It returns the partition's shard.
func blockedKeyRig(t *testing.T) (*rig, *shard) {
	t.Helper()
	g := newRig(t, flow.OrderingKey, nil)
	g.source("s")
	g.answer(g.dispatch()[0], e503)
	return g, g.c.shards[0]
}

// TestParkedBytesOnTheirWayPauseTheSource: the park moves a transaction
// took leave the source queue's bytes before the parking partition reads
// them back (a commit, then a fetch, later): counted as on their way
// (shard.parkingBytes), they pause the source as the parking queue's
// bytes do, and reading them back moves them from one count to the other.
func TestParkedBytesOnTheirWayPauseTheSource(t *testing.T) {
	g, sh := blockedKeyRig(t)
	value := make([]byte, 100<<10)
	const round = 100
	var written []*kgo.Record // committed, not yet read back
	for range 20 {
		for range round {
			g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte("s"), Value: value})
		}
		g.dispatch()
		tx := g.c.prepare()
		g.c.committed(tx)
		for _, m := range tx.moves {
			if m.rec.Topic == g.c.opts.ParkingTopic {
				written = append(written, m.rec)
			}
		}
		g.c.updatePauses(sh, time.Now())
		if sh.src.paused {
			break
		}
	}
	onTheWay := len(written) * len(value)
	if !sh.src.paused || onTheWay < pendingBytes || onTheWay > pendingBytes+round*len(value) {
		t.Fatalf("source paused %v with %d MiB parked on their way (%d B counted); want it paused at 64 MiB", sh.src.paused, onTheWay>>20, sh.parkingBytes)
	}
	if sh.src.bytes > round*(len("s")+len(value)+entryBytes) {
		t.Fatalf("the source queue holds %d bytes: its own bound paused it, not the parked bytes", sh.src.bytes)
	}
	for _, r := range written {
		if r.Value != nil { // parking ops carry no value
			g.read(r)
		}
	}
	g.c.updatePauses(sh, time.Now())
	if sh.parkingBytes != 0 || !sh.src.paused {
		t.Fatalf("read back: %d B still counted on their way, source paused %v; want 0 and still paused (the parking queue holds them)", sh.parkingBytes, sh.src.paused)
	}
}

// TestDriftedParkingBytesDoNotHoldTheSource: shard.parkingBytes is
// matched to the read-back by key, not by record; should it drift (another
// writer's parked record read back in place of one of ours), it is
// cleared once nothing is parked or on its way, so it cannot keep a
// source paused with an empty parking queue.
func TestDriftedParkingBytesDoNotHoldTheSource(t *testing.T) {
	g := newRig(t, flow.OrderingKey, nil)
	sh := g.c.shards[0]
	sh.parkingBytes = 2 * pendingBytes
	g.source("a")
	g.c.updatePauses(sh, time.Now())
	if sh.src.paused || sh.parkingBytes != 0 {
		t.Fatalf("nothing parked: source paused %v, %d B counted on their way; want running and 0", sh.src.paused, sh.parkingBytes)
	}
}

// TestSettledParkedRecordsLetGoOfTheirValues: a parking partition is
// committed up to its first record not settled, so a key blocked for long
// keeps every later parked record in the queue; those settled and taken by
// a transaction let go of their keys and values, and the queue's bytes
// with them: the buffers themselves can be collected, which nothing
// taken from them (a settle op's key, a retry move) may keep alive.
func TestSettledParkedRecordsLetGoOfTheirValues(t *testing.T) {
	var g *rig
	var bufs []weak.Pointer[byte]
	synctest.Test(t, func(t *testing.T) {
		g = newRig(t, flow.OrderingKey, nil)
		value := make([]byte, 100<<10)
		g.source("b")
		g.answer(g.dispatch()[0], e503)
		g.source("b") // parked first: it pins the parking partition's commit
		g.source("a")
		g.answer(g.dispatch()[0], e503)
		for range 3 {
			g.read(&kgo.Record{Topic: g.c.plan.Source, Key: []byte("a"), Value: value})
		}
		g.dispatch()
		g.commit()
		park := g.c.shards[0].park
		before := park.bytes - len(park.entries)*entryBytes // keys and values
		if before < 3*len(value) {
			t.Fatalf("the parking queue holds %d bytes, want a's three parked records among them", before)
		}
		for _, en := range park.entries {
			if len(en.rec.Value) == len(value) {
				bufs = append(bufs, weak.Make(&en.rec.Key[0])) // cloneKeyValue's buffer starts with the key
			}
		}

		time.Sleep(2 * time.Minute) // both heads are due
		var rs []*result
		for _, r := range g.dispatch() {
			if string(r.msg.Key) == "b" {
				g.answer(r, e503) // b stays blocked, on the next tier
				continue
			}
			rs = append(rs, r)
		}
		// a's head, then its parked records: the first fails once more
		// (a retry move from the parked entry), the others succeed.
		failed := false
		g.drain(rs, func(r *result) error {
			if r.en.q.stage == parkStage && !failed {
				failed = true
				return e503
			}
			return nil
		})
		g.commit()
		time.Sleep(2 * time.Minute)
		for {
			rs := g.dispatch()
			if len(rs) == 0 {
				break
			}
			g.drain(rs, func(r *result) error {
				if string(r.msg.Key) == "b" {
					return e503
				}
				return nil
			})
			g.commit()
		}
		sum := 0
		for _, en := range park.entries {
			sum += heldBytes(en)
			if en.settled && en.rec.Value != nil {
				t.Errorf("the settled parked record at offset %d still holds its %d-byte value", en.rec.Offset, len(en.rec.Value))
			}
		}
		if held := park.bytes - len(park.entries)*entryBytes; park.bytes != sum || held > before-3*len(value) {
			t.Fatalf("the parking queue counts %d bytes (its entries hold %d), keys and values %d; want at most %d once a's records settled", park.bytes, sum, held, before-3*len(value))
		}
		if len(park.entries) == 0 || park.entries[0].settled {
			t.Fatalf("the parking queue's first entry is settled or gone: b's parked record should pin it")
		}
	})
	if len(bufs) != 3 {
		t.Fatalf("%d parked records of 100 KiB read back, want 3", len(bufs))
	}
	g.logs = nil // the rig keeps every record written; a broker's log is not in our heap
	runtime.GC()
	for i, b := range bufs {
		if b.Value() != nil {
			t.Errorf("a's parked record %d: its key and value buffer is still reachable after it settled and a transaction took it", i)
		}
	}
	runtime.KeepAlive(g)
}
