package dlq

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
)

// Filter selects DLQ records. A zero Filter selects every waiting record;
// each set field narrows the selection (all must match).
type Filter struct {
	// States selects by state; empty means Waiting only.
	States []State
	// Classes selects by kretry-error-class: transient, permanent,
	// exhausted, or "unreadable" for records without readable kretry
	// headers.
	Classes []string
	// Statuses selects by kretry-error-status (HTTP status); 0 selects
	// records without one (timeouts, connection errors).
	Statuses []int
	// Since and Until bound the time the record was dead-lettered (its
	// timestamp): Since ≤ t < Until. Zero: unbounded.
	Since, Until time.Time
	// Key selects records whose key is these bytes exactly (HasKey).
	Key    []byte
	HasKey bool
	// Headers selects records having every one of these original headers:
	// a Value of nil matches any value.
	Headers []HeaderMatch
	// Text selects records whose kretry-error-message contains it (case
	// insensitive).
	Text string
	// Records selects these records only, as "<partition>/<offset>".
	Records []string
}

// HeaderMatch is one original-header condition of a Filter.
type HeaderMatch struct {
	Key   string
	Value []byte // nil: any value
}

// ParseHeaderMatch parses "key=value" or "key" (present, any value).
func ParseHeaderMatch(s string) (HeaderMatch, error) {
	if s == "" || strings.HasPrefix(s, "=") {
		return HeaderMatch{}, fmt.Errorf("header match %q: want key=value or key", s)
	}
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return HeaderMatch{Key: k}, nil
	}
	return HeaderMatch{Key: k, Value: []byte(v)}, nil
}

// ParseClasses checks class names for Filter.Classes.
func ParseClasses(s []string) error {
	for _, c := range s {
		switch c {
		case string(delivery.ClassTransient), string(delivery.ClassPermanent), string(delivery.ClassExhausted), ClassUnreadable:
		default:
			return fmt.Errorf("error class %q: want transient, permanent, exhausted or %s", c, ClassUnreadable)
		}
	}
	return nil
}

// ParseRef reads a "<partition>/<offset>" record reference, as kretry dlq
// list prints it (Entry.Ref); ok is false for anything else.
// It takes only the form kretry prints ("0/42"): "0/042" or "+0/42" would
// parse, and then match no record.
func ParseRef(s string) (partition int32, offset int64, ok bool) {
	p, o, ok := parseMarkKey(s)
	if !ok || markKey(p, o) != s {
		return 0, 0, false
	}
	return p, o, true
}

// ParseRecord checks a "<partition>/<offset>" record reference.
func ParseRecord(s string) error {
	if _, _, ok := ParseRef(s); !ok {
		return fmt.Errorf("record %q: want <partition>/<offset>, e.g. 0/42", s)
	}
	return nil
}

// ClassUnreadable is the class of a record without readable kretry headers.
const ClassUnreadable = "unreadable"

// Class is e's error class, or ClassUnreadable.
func (e *Entry) Class() string {
	if e.ID == "" {
		return ClassUnreadable
	}
	return string(e.DLQRecord.Class)
}

// Match reports whether f selects e.
func (f *Filter) Match(e *Entry) bool {
	states := f.States
	if len(states) == 0 {
		states = []State{Waiting}
	}
	switch {
	case !slices.Contains(states, e.State),
		len(f.Classes) > 0 && !slices.Contains(f.Classes, e.Class()),
		len(f.Statuses) > 0 && !slices.Contains(f.Statuses, e.Status),
		!f.Since.IsZero() && e.Timestamp.Before(f.Since),
		!f.Until.IsZero() && !e.Timestamp.Before(f.Until),
		f.HasKey && (e.Key == nil || !bytes.Equal(e.Key, f.Key)),
		f.Text != "" && !strings.Contains(strings.ToLower(e.Message), strings.ToLower(f.Text)),
		len(f.Records) > 0 && !slices.Contains(f.Records, markKey(e.Partition, e.Offset)):
		return false
	}
	for _, h := range f.Headers {
		if !e.hasHeader(h) {
			return false
		}
	}
	return true
}

// hasHeader reports whether e's original headers (all headers for a record
// without readable kretry headers) include h.
func (e *Entry) hasHeader(h HeaderMatch) bool {
	hs := e.Origin.Headers
	if e.ID == "" {
		hs = e.Headers
	}
	for _, rh := range hs {
		if rh.Key == h.Key && (h.Value == nil || bytes.Equal(rh.Value, h.Value)) {
			return true
		}
	}
	return false
}

// Ref is e's "<partition>/<offset>".
func (e *Entry) Ref() string { return markKey(e.Partition, e.Offset) }

// String renders f for logs: only the fields set.
func (f *Filter) String() string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	for _, s := range f.States {
		add("state", string(s))
	}
	if len(f.Classes) > 0 {
		add("class", strings.Join(f.Classes, ","))
	}
	for _, s := range f.Statuses {
		add("status", strconv.Itoa(s))
	}
	if !f.Since.IsZero() {
		add("since", f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		add("until", f.Until.UTC().Format(time.RFC3339))
	}
	if f.HasKey {
		add("key", strconv.Quote(string(f.Key)))
	}
	for _, h := range f.Headers {
		add("header", h.Key)
	}
	if f.Text != "" {
		add("text", strconv.Quote(f.Text))
	}
	if len(f.Records) > 0 {
		add("records", strings.Join(f.Records, ","))
	}
	return strings.Join(parts, " ")
}

// ErrNoRecord reports a record reference ("<partition>/<offset>") outside
// the DLQ: a partition it does not have, or an offset outside the
// partition's [log start offset, last stable offset).
var ErrNoRecord = errors.New("no such record in the DLQ")

// CheckRecords returns an ErrNoRecord naming the first of refs (checked
// references) that lies outside snap, which was read from topic: a filter
// that names it would select nothing, which an operator reads as "done".
func (snap *Snapshot) CheckRecords(topic string, refs []string) error {
	for _, ref := range refs {
		p, o, _ := ParseRef(ref)
		end, ok := snap.Ends[p]
		if !ok {
			return fmt.Errorf("%w: record %s: %s has no partition %d: it has %d partitions (0 to %d)", ErrNoRecord, ref, topic, p, len(snap.Ends), len(snap.Ends)-1)
		}
		start := snap.Starts[p]
		switch {
		case start == end:
			return fmt.Errorf("%w: record %s: partition %d of %s holds no records (log start offset and last stable offset %d)", ErrNoRecord, ref, p, topic, end)
		case o < start || o >= end:
			return fmt.Errorf("%w: record %s: partition %d of %s holds offsets %d to %d (records and transaction markers; log start offset %d, last stable offset %d)", ErrNoRecord, ref, p, topic, start, end-1, start, end)
		}
	}
	return nil
}
