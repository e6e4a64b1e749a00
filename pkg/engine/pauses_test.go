package engine

import (
	"fmt"
	"testing"

	"github.com/kretry/kretry/pkg/flow"
)

// TestMaxPendingSharesTheBudget: left to its default, MaxPending is the
// larger of its floor and pendingBudget shared by the assigned partitions;
// set, it is what it was set to, however many partitions there are.
func TestMaxPendingSharesTheBudget(t *testing.T) {
	cases := []struct {
		name       string
		maxPending int
		inFlight   int
		partitions int
		want       int
	}{
		{"default, 1 partition", 0, 0, 1, pendingBudget},
		{"default, 4 partitions", 0, 0, 4, pendingBudget / 4},
		{"default, 16 partitions: the floor", 0, 0, 16, 4096},
		{"default, 1000 partitions: the floor", 0, 0, 1000, 4096},
		{"default, 32 × MaxInFlight above the share", 0, 1000, 4, 32 * 1000},
		{"set", 200, 0, 4, 200},
		{"set above the budget", 100000, 0, 1, 100000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newRig(t, flow.OrderingNone, func(o *Options) { o.MaxPending, o.MaxInFlight = tc.maxPending, tc.inFlight })
			ps := make([]int32, tc.partitions)
			for i := range ps {
				ps[i] = int32(i)
			}
			g.c.assign(map[string][]int32{g.c.plan.Source: ps})
			if got := g.c.maxPending(); got != tc.want {
				t.Fatalf("maxPending with %d partitions = %d, want %d", len(g.c.shards), got, tc.want)
			}
		})
	}
}

// TestSourcePausesAtItsShare: with the default MaxPending, one assigned
// partition holds 5,000 fetched records without pausing (its share is
// pendingBudget); MaxPending set to 4,096 pauses it.
func TestSourcePausesAtItsShare(t *testing.T) {
	for _, tc := range []struct {
		maxPending int
		paused     bool
	}{{0, false}, {4096, true}} {
		t.Run(fmt.Sprintf("MaxPending %d", tc.maxPending), func(t *testing.T) {
			g := newRig(t, flow.OrderingNone, func(o *Options) { o.MaxPending = tc.maxPending })
			for i := range 5000 {
				g.source(fmt.Sprint("k", i))
			}
			g.dispatch()
			pause, _, _ := g.c.takePauses()
			if got := len(pause[g.c.plan.Source]) == 1; got != tc.paused {
				t.Fatalf("holding 5,000 records the source paused: %v, want %v (pauses %v)", got, tc.paused, pause)
			}
		})
	}
}
