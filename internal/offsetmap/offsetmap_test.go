package offsetmap

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomSpans are spans from base: single offsets (records in memory)
// with a random Done flag, and now and then a longer pending run (records
// of an inherited map not read yet), with gaps (records done before).
func randomSpans(rng *rand.Rand, base int64, n int, doneRate float64) (spans []Span, end int64) {
	at := base
	for range n {
		at += int64(rng.IntN(3)) // a gap of done records
		l := int64(1)
		done := rng.Float64() < doneRate
		if rng.IntN(20) == 0 {
			l, done = 1+int64(rng.IntN(50)), false
		}
		spans = append(spans, Span{From: at, To: at + l, Done: done})
		at += l
	}
	return spans, at + int64(rng.IntN(3))
}

// check decodes ch and verifies it against spans: a taken span is done,
// a span not taken is not, an offset in no span below End is done.
func check(t *testing.T, spans []Span, end int64, ch Choice) {
	t.Helper()
	if ch.Metadata == "" {
		if ch.Committed != ch.End {
			t.Fatalf("no metadata but committed %d != End %d", ch.Committed, ch.End)
		}
	}
	m, err := Decode(ch.Committed, ch.Metadata)
	if err != nil {
		t.Fatalf("own metadata does not decode: %v", err)
	}
	if ch.Metadata != "" && m.End != ch.End {
		t.Fatalf("map End %d, choice End %d", m.End, ch.End)
	}
	in := map[int64]int{}
	for i, sp := range spans {
		for o := sp.From; o < sp.To; o++ {
			in[o] = i
		}
		if ch.Take[i] && !sp.Done {
			t.Fatalf("span %d (%+v) taken but not Done", i, sp)
		}
	}
	lo := spans[0].From
	for o := lo; o < end+2; o++ {
		i, isSpan := in[o]
		switch {
		case o >= ch.End:
			if m.Done(o) {
				t.Fatalf("offset %d at or past End %d is done", o, ch.End)
			}
			if isSpan && ch.Take[i] {
				t.Fatalf("offset %d past End %d taken", o, ch.End)
			}
		case isSpan && ch.Take[i]:
			if o >= ch.Committed && !m.Done(o) {
				t.Fatalf("offset %d taken but not done in the map", o)
			}
		case isSpan:
			if m.Done(o) || o < ch.Committed {
				t.Fatalf("offset %d pending (span %+v) but done in the map", o, spans[i])
			}
		default:
			if o >= ch.Committed && !m.Done(o) {
				t.Fatalf("offset %d in no span below End but not done", o)
			}
		}
	}
}

func TestChooseRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		spans, end := randomSpans(rng, rng.Int64N(1<<40), 1+rng.IntN(300), rng.Float64())
		ch := Choose(spans, end, spans[0].From, 1<<20)
		for i, sp := range spans {
			if sp.Done != ch.Take[i] {
				t.Fatalf("a large budget took %v of span %+v", ch.Take[i], sp)
			}
		}
		if ch.End != end {
			t.Fatalf("End %d, want %d", ch.End, end)
		}
		check(t, spans, end, ch)
	}
}

func TestChooseKeepsItsBudget(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 2000 {
		budget := 40 + rng.IntN(400)
		spans, end := randomSpans(rng, rng.Int64N(1<<40), 1+rng.IntN(400), rng.Float64())
		// keepEnd: the last commit's End, somewhere among the spans.
		keep := spans[rng.IntN(len(spans))].From
		ch := Choose(spans, end, keep, budget)
		check(t, spans, end, ch)
		if ch.End < keep {
			t.Fatalf("case %d: End %d before the last commit's %d", i, ch.End, keep)
		}
		p := 0
		for p < len(spans) && spans[p].Done {
			p++
		}
		if encodedLen(spans, p, max(p, firstAtOrPast(spans, keep))) <= budget && len(ch.Metadata) > budget {
			t.Fatalf("case %d: %d bytes of metadata, budget %d", i, len(ch.Metadata), budget)
		}
	}
}

func firstAtOrPast(spans []Span, o int64) int {
	for i, sp := range spans {
		if sp.From >= o {
			return i
		}
	}
	return len(spans)
}

// TestChooseDoesNotSplitARunPastItsBudget: a restart finds one pending
// run of 4,000 records (a few bytes of metadata); every other one is done
// again. Marking them all done would split the run into 2,000: only as
// many as fit are marked, and the map stays within the budget.
func TestChooseDoesNotSplitARunPastItsBudget(t *testing.T) {
	var spans []Span
	for o := int64(1000); o < 5000; o++ {
		spans = append(spans, Span{From: o, To: o + 1, Done: o%2 == 1})
	}
	ch := Choose(spans, 5000, 5000, DefaultBudget)
	check(t, spans, 5000, ch)
	if len(ch.Metadata) > DefaultBudget {
		t.Fatalf("%d bytes of metadata, budget %d", len(ch.Metadata), DefaultBudget)
	}
	n := 0
	for _, tk := range ch.Take {
		if tk {
			n++
		}
	}
	if n == 0 || n == 2000 {
		t.Fatalf("%d of 2000 done records marked, want some but not all", n)
	}
}

// TestChooseMarksADonePrefixWhateverTheBudget: records done from the
// committed offset on need no metadata; a budget too small for any
// pending run still lets them go.
func TestChooseMarksADonePrefixWhateverTheBudget(t *testing.T) {
	spans := []Span{{From: 10, To: 11, Done: true}, {From: 11, To: 12, Done: true}, {From: 12, To: 13}, {From: 14, To: 15, Done: true}}
	ch := Choose(spans, 20, 0, 1)
	if !ch.Take[0] || !ch.Take[1] || ch.Take[3] || ch.Committed != 12 {
		t.Fatalf("Choose with a 1-byte budget: %+v, want the first two marked and the commit at 12", ch)
	}
}

func TestForeignStaleAndMalformed(t *testing.T) {
	for _, s := range []string{"", "member-1-abc", "k2:AAAA"} {
		m, err := Decode(10, s)
		if err != nil || m.Done(10) || m.Done(11) || m.End != 10 {
			t.Errorf("Decode(10, %q) = %+v, %v: want nothing done, no error", s, m, err)
		}
	}
	ch := Choose([]Span{{From: 100, To: 101}, {From: 105, To: 106}}, 200, 0, 0)
	if _, err := Decode(100, ch.Metadata); err != nil {
		t.Fatalf("own metadata: %v", err)
	}
	m, err := Decode(90, ch.Metadata)
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
	ch := Choose([]Span{{From: 7, To: 10}, {From: 20, To: 21}, {From: 40, To: 41}}, 100, 0, 0)
	f.Add(int64(7), ch.Metadata)
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
