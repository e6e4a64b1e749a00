// Package offsetmap encodes, in the metadata of a consumer group's offset
// commit, which records past the committed offset are still pending: the
// engine commits, per partition, the offset of its first pending record,
// and the records after it that are already done (delivered, or moved to
// a tier, the parking topic or the DLQ in the same transaction) are listed
// as not pending, so that the partition's next owner skips them instead of
// delivering and moving them a second time.
//
// It is how the Confluent Parallel Consumer commits records out of offset
// order ("offset map" in its commit metadata). A slow or stuck record then
// holds back only its own offset, not the moves and the memory of every
// record after it (issue 10: other keys with one slow key).
//
// A Map is relative to the committed offset C it is written with: every
// offset in [C, End) that is not in Pending is done; offsets at or past End
// are not known. The encoding is "k1:" followed by unpadded base64url of
// unsigned varints: C itself, End−C, then for each pending run its gap from
// the end of the previous run (from C for the first) and its length. A
// commit whose metadata does not start with "k1:" (franz-go writes the
// member id) says nothing past C, and neither does one whose C is not the
// commit's offset: its offset was moved without its metadata (an operator's
// offset reset), so the map is not about it.
//
// Kafka refuses metadata longer than offset.metadata.max.bytes (default
// 4096 bytes) with OFFSET_METADATA_TOO_LARGE: Choose keeps to a budget
// (DefaultBudget, half of that).
package offsetmap

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Prefix starts every metadata string this package writes.
const Prefix = "k1:"

// DefaultBudget is the longest metadata a Builder writes by default, in
// bytes: half of Kafka's default offset.metadata.max.bytes (4096).
const DefaultBudget = 2048

// Run is the offsets [From, To).
type Run struct{ From, To int64 }

// Map says which offsets past a committed offset are done.
type Map struct {
	// Committed is the committed offset the map is relative to.
	Committed int64
	// End: offsets in [Committed, End) that no Run of Pending holds are
	// done; offsets from End on are not known.
	End int64
	// Pending are sorted, disjoint, non-empty runs inside [Committed, End).
	Pending []Run
}

// Done reports whether offset o is known done: in [Committed, End) and in
// no pending run.
func (m *Map) Done(o int64) bool {
	if o < m.Committed || o >= m.End {
		return false
	}
	i := sort.Search(len(m.Pending), func(i int) bool { return m.Pending[i].To > o })
	return i == len(m.Pending) || o < m.Pending[i].From
}

// ErrMalformed is returned by Decode for metadata that starts with Prefix
// but does not decode to a valid map.
var ErrMalformed = errors.New("offsetmap: malformed commit metadata")

// ErrStale is returned by Decode for metadata written with another
// committed offset than the one it is read with.
var ErrStale = errors.New("offsetmap: commit metadata of another offset")

// Decode reads the metadata s of a commit at offset committed. Metadata
// without Prefix (none, or another writer's) gives a map with nothing done
// and no error.
func Decode(committed int64, s string) (Map, error) {
	m := Map{Committed: committed, End: committed}
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return m, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return m, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	next := func() (int64, bool) {
		v, n := binary.Uvarint(raw)
		if n <= 0 || v > 1<<62 {
			return 0, false
		}
		raw = raw[n:]
		return int64(v), true
	}
	c, ok := next()
	if !ok {
		return m, fmt.Errorf("%w: no committed offset", ErrMalformed)
	}
	if c != committed {
		return m, fmt.Errorf("%w: written for offset %d, committed at %d", ErrStale, c, committed)
	}
	span, ok := next()
	if !ok || committed > 1<<62-span {
		return Map{Committed: committed, End: committed}, fmt.Errorf("%w: bad end", ErrMalformed)
	}
	m.End = committed + span
	at := committed
	for len(raw) > 0 {
		gap, ok1 := next()
		n, ok2 := next()
		if !ok1 || !ok2 || n == 0 || gap > m.End-at || n > m.End-at-gap || (at == committed && len(m.Pending) == 0 && gap != 0) {
			return Map{Committed: committed, End: committed}, fmt.Errorf("%w: bad run after offset %d", ErrMalformed, at)
		}
		r := Run{From: at + gap, To: at + gap + n}
		m.Pending = append(m.Pending, r)
		at = r.To
	}
	return m, nil
}

// Span is a run of offsets [From, To) past a partition's committed offset
// that its last commit did not mark done: records still pending, or, with
// Done, records done since and free to be marked so.
type Span struct {
	From, To int64
	Done     bool
}

// Choice is a partition's next commit.
type Choice struct {
	// Take says, per span given to Choose, whether the commit marks it done.
	Take []bool
	// Committed is the offset to commit and End the map's End: the first
	// pending offset, or End when none is.
	Committed, End int64
	// Metadata is the commit's metadata ("" when nothing is pending).
	Metadata string
}

// Choose decides a partition's next commit: it marks done as many Done
// spans, in offset order, as keep its metadata within budget bytes
// (DefaultBudget when budget ≤ 0).
//
// spans are sorted and disjoint, below end, the offset after the last
// record known; an offset below end in no span is done. keepEnd is the End
// of the partition's last commit (or the one it started from): the new map
// may end before end, leaving the records past it to a later commit, but
// never before keepEnd, which would forget records that commit marked
// done. Marking done only a prefix of the Done spans keeps the metadata of
// what was pending at the last commit no longer than that commit's (a
// record done in the middle of a pending run splits it in two). Marking a
// span done never makes the map claim a record done that is not.
func Choose(spans []Span, end, keepEnd int64, budget int) Choice {
	if budget <= 0 {
		budget = DefaultBudget
	}
	// The map covers the spans up to cover(k) when the Done spans among the
	// first k are marked: at least those below keepEnd. A span it does not
	// cover waits, with what follows, for a later commit.
	lo := sort.Search(len(spans), func(i int) bool { return spans[i].From >= keepEnd })
	cover := func(k int) int { return max(k, lo) }
	fits := func(k int) bool { return encodedLen(spans, k, cover(k)) <= budget }
	// A leading run of Done spans goes under the committed offset and
	// costs nothing: it is always marked.
	p := 0
	for p < len(spans) && spans[p].Done {
		p++
	}
	k := len(spans)
	if !fits(k) {
		k = p
		if fits(p) {
			// fits(k) and not fits(hi): find the last k that fits between.
			hi := len(spans)
			for hi-k > 1 {
				mid := (k + hi) / 2
				if fits(mid) {
					k = mid
				} else {
					hi = mid
				}
			}
		} // else the last commit's map is written again as it was
	}
	c := cover(k)
	ch := Choice{Take: make([]bool, len(spans)), End: end}
	if c < len(spans) {
		ch.End = spans[c].From
	}
	var runs []Run
	for i, sp := range spans[:c] {
		if i < k && sp.Done {
			ch.Take[i] = true
			continue
		}
		if n := len(runs); n > 0 && runs[n-1].To == sp.From {
			runs[n-1].To = sp.To
		} else {
			runs = append(runs, Run{From: sp.From, To: sp.To})
		}
	}
	ch.Committed, ch.Metadata = ch.End, ""
	if len(runs) > 0 {
		ch.Committed = runs[0].From
		ch.Metadata = encode(Map{Committed: ch.Committed, End: ch.End, Pending: runs})
	}
	return ch
}

// encodedLen is the length of the metadata that marks done the Done spans
// among spans[:k] and lists the other spans of spans[:c] as pending, with
// the longest committed offset and End.
func encodedLen(spans []Span, k, c int) int {
	size, at, runLen, runs := 0, int64(0), int64(0), 0
	for i, sp := range spans[:c] {
		if i < k && sp.Done {
			continue
		}
		if runs > 0 && sp.From == at {
			size += uvarintLen(runLen+sp.To-sp.From) - uvarintLen(runLen)
			runLen += sp.To - sp.From
		} else {
			gap := int64(0)
			if runs > 0 {
				gap = sp.From - at
			}
			runLen = sp.To - sp.From
			size += uvarintLen(gap) + uvarintLen(runLen)
			runs++
		}
		at = sp.To
	}
	if runs == 0 {
		return 0
	}
	return len(Prefix) + base64.RawURLEncoding.EncodedLen(2*binary.MaxVarintLen64+size)
}

// encode writes m as metadata.
func encode(m Map) string {
	raw := binary.AppendUvarint(nil, uint64(m.Committed))
	raw = binary.AppendUvarint(raw, uint64(m.End-m.Committed))
	at := m.Committed
	for _, r := range m.Pending {
		raw = binary.AppendUvarint(raw, uint64(r.From-at))
		raw = binary.AppendUvarint(raw, uint64(r.To-r.From))
		at = r.To
	}
	return Prefix + base64.RawURLEncoding.EncodeToString(raw)
}

func uvarintLen(v int64) int {
	var buf [binary.MaxVarintLen64]byte
	return binary.PutUvarint(buf[:], uint64(v))
}
