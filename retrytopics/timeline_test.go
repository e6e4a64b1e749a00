package retrytopics

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestTimeline: Next is always the partition due soonest, through adds,
// moves and deletes, checked against a plain map.
func TestTimeline(t *testing.T) {
	var tl Timeline[int]
	if _, _, ok := tl.Next(); ok {
		t.Fatal("an empty timeline has a next partition")
	}
	base := time.Unix(1_000_000, 0)
	want := map[int]time.Time{}
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 5000 {
		k := rng.IntN(50)
		if rng.IntN(4) == 0 {
			tl.Delete(k)
			delete(want, k)
		} else {
			d := base.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
			tl.Set(k, d)
			want[k] = d
		}
		if tl.Len() != len(want) {
			t.Fatalf("step %d: Len %d, want %d", step, tl.Len(), len(want))
		}
		k2, d2, ok := tl.Next()
		if len(want) == 0 {
			if ok {
				t.Fatalf("step %d: Next on an empty timeline", step)
			}
			continue
		}
		soonest := slices.MinFunc(slicesOf(want), func(a, b time.Time) int { return a.Compare(b) })
		if !ok || !d2.Equal(soonest) || !want[k2].Equal(d2) {
			t.Fatalf("step %d: Next = %d %v, want a partition due at %v", step, k2, d2, soonest)
		}
	}
}

func slicesOf(m map[int]time.Time) []time.Time {
	var out []time.Time
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
