package offsetmap

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// build adds pending (sorted) with force and returns the commit's offset
// and metadata for end.
func build(pending []int64, end int64) (int64, string) {
	b := NewBuilder(1 << 20)
	for _, o := range pending {
		b.Add(o, true)
	}
	return b.Committed(end), b.Metadata(end)
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		base := rng.Int64N(1 << 40)
		span := 1 + rng.Int64N(5000)
		var pending []int64
		density := rng.Float64()
		for o := base; o < base+span; o++ {
			if rng.Float64() < density {
				pending = append(pending, o)
			}
		}
		end := base + span
		c, meta := build(pending, end)
		if len(pending) == 0 {
			if c != end || meta != "" {
				t.Fatalf("case %d: nothing pending: committed %d meta %q, want %d and none", i, c, meta, end)
			}
			continue
		}
		if c != pending[0] {
			t.Fatalf("case %d: committed %d, want the first pending offset %d", i, c, pending[0])
		}
		m, err := Decode(c, meta)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		isPending := map[int64]bool{}
		for _, o := range pending {
			isPending[o] = true
		}
		for o := c - 2; o < end+2; o++ {
			want := o >= c && o < end && !isPending[o]
			if got := m.Done(o); got != want {
				t.Fatalf("case %d: Done(%d) = %v, want %v", i, o, got, want)
			}
		}
	}
}

func TestBudget(t *testing.T) {
	for _, budget := range []int{64, 300, DefaultBudget} {
		b := NewBuilder(budget)
		var added []int64
		for o := int64(1_000_000_000); o < 1_000_000_000+100_000; o += 3 { // every run one offset, gap 2
			if b.Add(o, false) {
				added = append(added, o)
			} else {
				break
			}
		}
		end := int64(1 << 62)
		meta := b.Metadata(end)
		if len(meta) > budget {
			t.Errorf("budget %d: metadata is %d bytes", budget, len(meta))
		}
		if len(added) < 2 {
			t.Fatalf("budget %d: only %d offsets fit", budget, len(added))
		}
		// A refused offset leaves the builder as it was: the map decodes to
		// exactly what was added.
		m, err := Decode(b.Committed(end), meta)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(m.Pending); got != len(added) {
			t.Errorf("budget %d: %d runs decoded, %d added", budget, got, len(added))
		}
	}
	// Extending a run costs nothing most of the time: a long run fits.
	b := NewBuilder(64)
	for o := range int64(100_000) {
		if !b.Add(o, false) {
			t.Fatalf("a run of consecutive offsets stopped fitting at %d", o)
		}
	}
}

func TestForeignStaleAndMalformed(t *testing.T) {
	for _, s := range []string{"", "member-1-abc", "k2:AAAA"} {
		m, err := Decode(10, s)
		if err != nil || m.Done(10) || m.Done(11) || m.End != 10 {
			t.Errorf("Decode(10, %q) = %+v, %v: want nothing done, no error", s, m, err)
		}
	}
	_, meta := build([]int64{100, 105}, 200)
	if _, err := Decode(100, meta); err != nil {
		t.Fatalf("own metadata: %v", err)
	}
	m, err := Decode(90, meta)
	if !errors.Is(err, ErrStale) || m.Done(101) {
		t.Errorf("metadata of offset 100 read at 90: %+v, %v; want ErrStale and nothing done", m, err)
	}
	for _, s := range []string{"k1:***", "k1:", "k1:" + strings.Repeat("_", 30)} {
		m, err := Decode(100, s)
		if !errors.Is(err, ErrMalformed) || m.Done(101) {
			t.Errorf("Decode(%q) = %+v, %v: want ErrMalformed and nothing done", s, m, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	_, meta := build([]int64{7, 8, 9, 20, 40}, 100)
	f.Add(int64(7), meta)
	f.Add(int64(0), "k1:AAEB")
	f.Fuzz(func(t *testing.T, committed int64, s string) {
		if committed < 0 {
			return
		}
		m, err := Decode(committed, s)
		if err != nil {
			if m.End != committed || len(m.Pending) != 0 {
				t.Fatalf("an error with a map that says something: %+v", m)
			}
			return
		}
		at := committed
		for _, r := range m.Pending {
			if r.From < at || r.To <= r.From || r.To > m.End {
				t.Fatalf("run %+v out of order or out of [%d, %d)", r, committed, m.End)
			}
			at = r.To
		}
	})
}
