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
// 4096 bytes) with OFFSET_METADATA_TOO_LARGE: a Builder keeps to its
// budget (DefaultBudget, half of that).
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

// Builder collects the pending offsets of one partition, in offset order,
// and writes them as commit metadata within a budget. The first offset
// added is the commit's offset: nothing before it is pending.
type Builder struct {
	budget int
	runs   []Run
	size   int // raw varint bytes of runs, End not counted
}

// NewBuilder starts a partition's metadata, at most budget bytes long
// (DefaultBudget when budget ≤ 0).
func NewBuilder(budget int) *Builder {
	if budget <= 0 {
		budget = DefaultBudget
	}
	return &Builder{budget: budget}
}

// Add adds the pending offset o, which must be past every offset added
// before. With force it is added whatever the budget; otherwise only if
// the metadata, with any End, stays within the budget. It reports whether
// o was added.
func (b *Builder) Add(o int64, force bool) bool {
	if n := len(b.runs); n > 0 && o == b.runs[n-1].To {
		l := b.runs[n-1].To - b.runs[n-1].From
		grow := uvarintLen(l+1) - uvarintLen(l)
		if !force && !b.fits(b.size+grow) {
			return false
		}
		b.runs[n-1].To++
		b.size += grow
		return true
	}
	at := o
	if n := len(b.runs); n > 0 {
		at = b.runs[n-1].To
	}
	grow := uvarintLen(o-at) + 1
	if !force && !b.fits(b.size+grow) {
		return false
	}
	b.runs = append(b.runs, Run{From: o, To: o + 1})
	b.size += grow
	return true
}

// AddRun adds the pending offsets [from, to), which must be past every
// offset added before, whatever the budget.
func (b *Builder) AddRun(from, to int64) {
	if from >= to {
		return
	}
	if n := len(b.runs); n > 0 && from == b.runs[n-1].To {
		l := b.runs[n-1].To - b.runs[n-1].From
		b.size += uvarintLen(l+to-from) - uvarintLen(l)
		b.runs[n-1].To = to
		return
	}
	at := from
	if n := len(b.runs); n > 0 {
		at = b.runs[n-1].To
	}
	b.size += uvarintLen(from-at) + uvarintLen(to-from)
	b.runs = append(b.runs, Run{From: from, To: to})
}

// fits reports whether metadata of size raw bytes of runs, with the longest
// committed offset and End, keeps within the budget.
func (b *Builder) fits(size int) bool {
	return len(Prefix)+base64.RawURLEncoding.EncodedLen(2*binary.MaxVarintLen64+size) <= b.budget
}

// Committed is the offset to commit with end, the offset past the last
// record known: the first pending offset, or end when none is pending.
func (b *Builder) Committed(end int64) int64 {
	if len(b.runs) == 0 {
		return end
	}
	return b.runs[0].From
}

// Metadata is the commit metadata for a commit at Committed(end), where
// end is past every offset added: "" when nothing is pending.
func (b *Builder) Metadata(end int64) string {
	if len(b.runs) == 0 {
		return ""
	}
	c := b.runs[0].From
	raw := make([]byte, 0, 2*binary.MaxVarintLen64+b.size)
	raw = binary.AppendUvarint(raw, uint64(c))
	raw = binary.AppendUvarint(raw, uint64(end-c))
	at := c
	for _, r := range b.runs {
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
