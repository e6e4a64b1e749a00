package retrytopics

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// Origin is what kretry knows of a record's history: its original
// coordinates on the source topic and its failures so far. A record read
// from the source has Attempts 0 and its own coordinates; a record read from
// a tier carries all of it in its kretry-* headers (DESIGN.md invariant 5).
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	// Attempts is the number of deliveries made before this one.
	Attempts int64
	// FirstFailure is zero before the first failure.
	FirstFailure time.Time
	// Due is when a tier may deliver the record; zero means now.
	Due time.Time
	// Headers are the original headers, with kretry's leading run removed.
	Headers []kgo.RecordHeader
	// Redrives is how many times the record was redriven from the DLQ and
	// RedriveID the redrive that moved it last (redrive.go); 0 and "" for
	// a record never redriven.
	Redrives  int64
	RedriveID string
}

// ID is the CloudEvents id: "<topic>/<partition>/<offset>" of the original.
func (o *Origin) ID() string { return flow.RecordID(o.Topic, o.Partition, o.Offset) }

// ErrBadHeaders reports a record on a tier whose kretry headers are missing
// or unreadable. ReadOrigin still returns a usable Origin with it.
var ErrBadHeaders = errors.New("kretry headers missing or unreadable")

// hasKretryRun reports whether hs starts with the headers kretry writes, in
// the order it writes them.
func hasKretryRun(hs []kgo.RecordHeader) bool {
	if len(hs) < len(Headers) {
		return false
	}
	for i, name := range Headers {
		if hs[i].Key != name {
			return false
		}
	}
	return true
}

// ReadOrigin reads the Origin of r. For a record from the source
// (fromSource), r itself is the original. For a record from a tier, the
// leading run of kretry headers is parsed and removed. When that run is
// absent or a value is unreadable (someone wrote to the tier by hand),
// ReadOrigin falls back to r's own coordinates and fields it could not read
// (attempts = fallbackAttempts, timestamp = r's, due = now) and returns
// ErrBadHeaders wrapped with the detail, so the caller can log it and still
// deliver.
func ReadOrigin(r *kgo.Record, fromSource bool, fallbackAttempts int64) (Origin, error) {
	self := Origin{
		Topic:     r.Topic,
		Partition: r.Partition,
		Offset:    r.Offset,
		Timestamp: r.Timestamp,
		Headers:   r.Headers,
	}
	if fromSource {
		return self, nil
	}
	if !hasKretryRun(r.Headers) {
		self.Attempts = fallbackAttempts
		return self, fmt.Errorf("%w: no kretry header run on %s/%d/%d", ErrBadHeaders, r.Topic, r.Partition, r.Offset)
	}
	hp := &headerParser{hs: r.Headers[:len(Headers)]}
	o := Origin{Topic: hp.value(HeaderOriginalTopic), Headers: r.Headers[len(Headers):]}
	readRedrive(&o) // redrive
	o.Partition = int32(hp.integer(HeaderOriginalPartition, 32))
	o.Offset = hp.integer(HeaderOriginalOffset, 64)
	o.Attempts = hp.integer(HeaderAttempt, 64)
	nerr := len(hp.errs)
	o.Timestamp = hp.rfc3339(HeaderOriginalTimestamp, false)
	if len(hp.errs) > nerr {
		// Unreadable: r's own, not the zero time, which would reach
		// ce-time and be written on as the original timestamp.
		o.Timestamp = r.Timestamp
	}
	o.FirstFailure = hp.rfc3339(HeaderFirstFailureTime, true)
	o.Due = hp.rfc3339(HeaderDueTime, true)
	errs := hp.errs
	if o.Topic == "" {
		errs = append(errs, fmt.Errorf("%s is empty", HeaderOriginalTopic))
	}
	if o.Partition < 0 || o.Offset < 0 || o.Topic == "" {
		o.Topic, o.Partition, o.Offset = r.Topic, r.Partition, r.Offset
	}
	if o.Attempts < 0 {
		o.Attempts = fallbackAttempts
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("%w on %s/%d/%d: %w", ErrBadHeaders, r.Topic, r.Partition, r.Offset, errors.Join(errs...))
	}
	return o, nil
}

// headerParser reads the values of a run of kretry headers, keeping an
// error for each value that does not parse, in the order read.
type headerParser struct {
	hs   []kgo.RecordHeader
	errs []error
}

// value is header name's value, "" when the run has none.
func (p *headerParser) value(name string) string {
	for _, h := range p.hs {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// integer is header name's value as a non-negative integer of bits bits, -1
// (and an error kept) when it is not one.
func (p *headerParser) integer(name string, bits int) int64 {
	n, err := strconv.ParseInt(p.value(name), 10, bits)
	if err != nil || n < 0 {
		p.errs = append(p.errs, fmt.Errorf("%s: %q is not a non-negative integer", name, p.value(name)))
		return -1
	}
	return n
}

// rfc3339 is header name's value as an RFC 3339 time: the zero time when it
// is empty and optional, and when it does not parse (an error kept).
func (p *headerParser) rfc3339(name string, optional bool) time.Time {
	s := p.value(name)
	if s == "" && optional {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %q is not an RFC 3339 time", name, s))
	}
	return t
}

// Failure describes the failed delivery that causes a move.
type Failure struct {
	Class   delivery.Class
	Status  int // 0 when there was no HTTP status
	Message string
	At      time.Time // sidecar clock at the failure
}

// Move describes one record to write to a tier or the DLQ.
type Move struct {
	Origin Origin
	Key    []byte // nil for a null key
	Value  []byte // nil for a tombstone
	// Topic is the destination; Stage names it in kretry-stage.
	Topic string
	// Due is the kretry-due-time; zero for the DLQ (written empty).
	Due     time.Time
	Failure Failure
	Group   string
	Version string
	// MaxBytes is the destination's max.message.bytes; the error message
	// is truncated so the record fits. 0 means no limit.
	MaxBytes int
	// Parked marks a move to the parking topic: the record was not
	// delivered, so kretry-attempt keeps Origin.Attempts and the failure
	// headers are empty (kretry-first-failure-time too, unless an earlier
	// failure exists). Failure.At is still the move time (the record
	// timestamp).
	Parked bool
}

// MaxErrorMessage bounds kretry-error-message even where the topic would
// take more (bytes).
const MaxErrorMessage = 16 << 10

// truncMarker ends a truncated error message.
const truncMarker = "…[truncated]"

// Record builds the record for m: the kretry header run (replacing any
// earlier one: error headers are replaced per hop, never appended), then
// the original headers byte for byte; key, value (nil kept nil) and the
// original partition (tiers and DLQ are co-partitioned with the source).
// The record's timestamp is the move time, so retention on the tier counts
// from the move; the original timestamp is in kretry-original-timestamp.
func (m *Move) Record() *kgo.Record {
	o := &m.Origin
	firstS, lastS, status := m.failureValues()
	due := ""
	if !m.Due.IsZero() {
		due = formatTime(m.Due)
	}
	attempt := o.Attempts
	if attempt < math.MaxInt64 && !m.Parked { // saturate: a wrapped count would be negative and unreadable on the next hop
		attempt++
	}
	hs := make([]kgo.RecordHeader, 0, len(Headers)+len(o.Headers))
	for _, kv := range [len(Headers)][2]string{
		{HeaderAttempt, strconv.FormatInt(attempt, 10)},
		{HeaderStage, m.Topic},
		{HeaderDueTime, due},
		{HeaderOriginalTopic, o.Topic},
		{HeaderOriginalPartition, strconv.FormatInt(int64(o.Partition), 10)},
		{HeaderOriginalOffset, strconv.FormatInt(o.Offset, 10)},
		{HeaderOriginalTimestamp, formatTime(o.Timestamp)},
		{HeaderFirstFailureTime, firstS},
		{HeaderLastFailureTime, lastS},
		{HeaderErrorClass, string(m.Failure.Class)},
		{HeaderErrorStatus, status},
		{HeaderErrorMessage, ""}, // filled below, once the room is known
		{HeaderGroup, m.Group},
		{HeaderVersion, m.Version},
	} {
		hs = append(hs, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
	}
	hs = appendRedrive(hs, o) // redrive
	hs = append(hs, o.Headers...)
	r := &kgo.Record{
		Topic:     m.Topic,
		Partition: o.Partition,
		Key:       m.Key,
		Value:     m.Value,
		Headers:   hs,
		Timestamp: m.Failure.At,
	}
	room := MaxErrorMessage
	if m.MaxBytes > 0 {
		room = min(room, m.MaxBytes-RecordSize(r))
	}
	hs[11].Value = []byte(Truncate(m.Failure.Message, room))
	return r
}

// failureValues are the values of kretry-first-failure-time,
// kretry-last-failure-time and kretry-error-status for m: a parked record
// carries none of them but a first failure time the origin already had.
func (m *Move) failureValues() (first, last, status string) {
	o := &m.Origin
	firstAt := o.FirstFailure
	if firstAt.IsZero() {
		firstAt = m.Failure.At
	}
	if m.Failure.Status != 0 {
		status = strconv.Itoa(m.Failure.Status)
	}
	first, last = formatTime(firstAt), formatTime(m.Failure.At)
	if m.Parked {
		first, last, status = "", "", ""
		if !o.FirstFailure.IsZero() {
			first = formatTime(o.FirstFailure)
		}
	}
	return first, last, status
}

func formatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

// batchOverhead is the size of a record batch header (bytes) in the v2
// format (KIP-98), which a lone record pays in full.
const batchOverhead = 61

// RecordSize is an upper bound of r's size in a record batch of its own
// (bytes), the quantity max.message.bytes limits: batch header, then every
// varint at its widest.
func RecordSize(r *kgo.Record) int {
	n := batchOverhead + 5 + 1 + 10 + 5 + 5 + len(r.Key) + 5 + len(r.Value) + 5
	for _, h := range r.Headers {
		n += 5 + len(h.Key) + 5 + len(h.Value)
	}
	return n
}

// Truncate returns s cut to at most n bytes at a UTF-8 boundary, ending in
// a marker when it was cut. n ≤ 0 yields "".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	if n <= len(truncMarker) {
		return ""
	}
	cut := n - len(truncMarker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncMarker
}
