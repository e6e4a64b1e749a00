package engine

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/flow"
)

// TestMaxPendingSharesTheBudget: left to its default, MaxPending is the
// larger of its floor and the records the assigned partitions share, at
// most pendingBudget and at most pendingBytes of records of the mean size
// fetched; set, it is what it was set to, however many partitions and
// whatever the records' size.
func TestMaxPendingSharesTheBudget(t *testing.T) {
	cases := []struct {
		name       string
		maxPending int
		inFlight   int
		partitions int
		size       int // bytes of key and value of every record fetched
		want       int
	}{
		{"default, 1 partition", 0, 0, 1, 100, pendingBudget},
		{"default, 4 partitions", 0, 0, 4, 100, pendingBudget / 4},
		{"default, 16 partitions: the floor", 0, 0, 16, 100, 4096},
		{"default, 1000 partitions: the floor", 0, 0, 1000, 100, 4096},
		{"default, 32 × MaxInFlight above the share", 0, 1000, 4, 100, 32 * 1000},
		{"default, 1 KiB records on 4 partitions: 64 MiB", 0, 0, 4, 1024, pendingBytes / (1024 + entryBytes) / 4},
		{"default, 10 KiB records on 1 partition: 64 MiB", 0, 0, 1, 10240, pendingBytes / (10240 + entryBytes)},
		{"default, 100 KiB records: the floor", 0, 0, 1, 102400, 4096},
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
			for range 1000 {
				g.c.recordBytes.observe(tc.size)
			}
			if got := g.c.maxPending(); got != tc.want {
				t.Fatalf("maxPending with %d partitions = %d, want %d", len(g.c.shards), got, tc.want)
			}
		})
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
