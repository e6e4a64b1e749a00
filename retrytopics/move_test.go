package retrytopics_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// marker is what Truncate appends to a cut message.
const marker = "…[truncated]"

// msTime is t at the precision of the kretry time headers.
func msTime(t time.Time) time.Time { return t.Truncate(time.Millisecond) }

func header(t *testing.T, r *kgo.Record, name string) string {
	t.Helper()
	var vals []string
	for _, h := range r.Headers[:min(len(r.Headers), len(retrytopics.Headers))] {
		if h.Key == name {
			vals = append(vals, string(h.Value))
		}
	}
	if len(vals) != 1 {
		t.Fatalf("header %s occurs %d times in the kretry run, want once", name, len(vals))
	}
	return vals[0]
}

// sameHeaders compares keys and values byte for byte, in order.
func sameHeaders(a, b []kgo.RecordHeader) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// checkRun checks that r starts with exactly one kretry header run, in the
// written order, followed by want byte for byte.
func checkRun(t *testing.T, r *kgo.Record, want []kgo.RecordHeader) {
	t.Helper()
	n := len(retrytopics.Headers)
	if len(r.Headers) != n+len(want) {
		t.Fatalf("record has %d headers, want %d kretry + %d original", len(r.Headers), n, len(want))
	}
	for i, name := range retrytopics.Headers {
		if r.Headers[i].Key != name {
			t.Fatalf("header %d is %q, want %q", i, r.Headers[i].Key, name)
		}
	}
	if got := r.Headers[n:]; !sameHeaders(got, want) {
		t.Fatalf("original headers after the run:\n got %q\nwant %q", got, want)
	}
}

// originalHeaders are binary, duplicate, empty and nil-valued.
func originalHeaders() []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: "trace", Value: []byte("abc")},
		{Key: "bin", Value: []byte{0x00, 0xff, 0xfe, '\n', 0x80}},
		{Key: "trace", Value: []byte("def")},
		{Key: "empty", Value: []byte{}},
		{Key: "nil", Value: nil},
		{Key: "", Value: []byte("no key")},
		{Key: "kretry-attempt", Value: []byte("not ours: not leading")},
	}
}

var (
	eastern = time.FixedZone("UTC-5", -5*3600)
	srcTime = time.Date(2026, 1, 2, 3, 4, 5, 678_901_234, eastern)
	fail1   = time.Date(2026, 1, 2, 8, 4, 6, 123_456_789, time.UTC)
	fail2   = fail1.Add(61*time.Second + 7*time.Millisecond + 999*time.Microsecond)
	fail3   = fail2.Add(11 * time.Minute)
)

func sourceRecord() *kgo.Record {
	return &kgo.Record{
		Topic:     "orders",
		Partition: 2,
		Offset:    41,
		Key:       nil,
		Value:     nil,
		Timestamp: srcTime,
		Headers:   originalHeaders(),
	}
}

// consumed sets the coordinates r would have when consumed from its topic.
func consumed(r *kgo.Record, offset int64) *kgo.Record {
	r.Offset = offset
	return r
}

func TestReadOriginFromSource(t *testing.T) {
	r := sourceRecord()
	r.Key, r.Value = []byte("k"), []byte("v")
	o, err := retrytopics.ReadOrigin(r, true, 5)
	if err != nil {
		t.Fatal(err)
	}
	if o.Topic != "orders" || o.Partition != 2 || o.Offset != 41 || !o.Timestamp.Equal(srcTime) {
		t.Errorf("origin %s at %v, want orders/2/41 at %v", o.ID(), o.Timestamp, srcTime)
	}
	if o.Attempts != 0 || !o.FirstFailure.IsZero() || !o.Due.IsZero() {
		t.Errorf("origin attempts %d, first failure %v, due %v; want 0 and zero times", o.Attempts, o.FirstFailure, o.Due)
	}
	if !sameHeaders(o.Headers, originalHeaders()) {
		t.Errorf("origin headers %q, want all of the record's %q", o.Headers, originalHeaders())
	}
	if got, want := o.ID(), "orders/2/41"; got != want {
		t.Errorf("ID() = %q, want %q", got, want)
	}
}

// TestMoveRoundTrip moves a source record through two tiers into the DLQ,
// re-reading it from each stage as the engine does.
func TestMoveRoundTrip(t *testing.T) {
	src := sourceRecord()
	o0, err := retrytopics.ReadOrigin(src, true, 0)
	if err != nil {
		t.Fatal(err)
	}

	// Hop 1: source → tier 1.
	due1 := fail1.Add(time.Minute + 500*time.Microsecond)
	m1 := retrytopics.Move{
		Origin:  o0,
		Key:     src.Key,
		Value:   src.Value,
		Topic:   "orders.retry.1m",
		Due:     due1,
		Failure: retrytopics.Failure{Class: delivery.ClassTransient, Status: 503, Message: "status 503: try later", At: fail1},
		Group:   "orders-kretry",
		Version: "v1.2.3",
	}
	r1 := m1.Record()
	if r1.Topic != "orders.retry.1m" || r1.Partition != 2 {
		t.Errorf("hop 1 record on %s/%d, want orders.retry.1m/2 (co-partitioned)", r1.Topic, r1.Partition)
	}
	if r1.Key != nil || r1.Value != nil {
		t.Errorf("hop 1 key %q value %q, want both nil", r1.Key, r1.Value)
	}
	if !r1.Timestamp.Equal(fail1) {
		t.Errorf("hop 1 timestamp %v, want the move time %v", r1.Timestamp, fail1)
	}
	checkRun(t, r1, originalHeaders())
	for name, want := range map[string]string{
		retrytopics.HeaderAttempt:           "1",
		retrytopics.HeaderStage:             "orders.retry.1m",
		retrytopics.HeaderDueTime:           "2026-01-02T08:05:06.123Z",
		retrytopics.HeaderOriginalTopic:     "orders",
		retrytopics.HeaderOriginalPartition: "2",
		retrytopics.HeaderOriginalOffset:    "41",
		retrytopics.HeaderOriginalTimestamp: "2026-01-02T08:04:05.678Z",
		retrytopics.HeaderFirstFailureTime:  "2026-01-02T08:04:06.123Z",
		retrytopics.HeaderLastFailureTime:   "2026-01-02T08:04:06.123Z",
		retrytopics.HeaderErrorClass:        "transient",
		retrytopics.HeaderErrorStatus:       "503",
		retrytopics.HeaderErrorMessage:      "status 503: try later",
		retrytopics.HeaderGroup:             "orders-kretry",
		retrytopics.HeaderVersion:           "v1.2.3",
	} {
		if got := header(t, r1, name); got != want {
			t.Errorf("hop 1 %s = %q, want %q", name, got, want)
		}
	}

	o1, err := retrytopics.ReadOrigin(consumed(r1, 7), false, 1)
	if err != nil {
		t.Fatalf("ReadOrigin of hop 1: %v", err)
	}
	checkOrigin(t, "hop 1", o1, 1, fail1, due1)

	// Hop 2: tier 1 → tier 2, with another error and no status.
	due2 := fail2.Add(10 * time.Minute)
	m2 := retrytopics.Move{
		Origin:  o1,
		Key:     r1.Key,
		Value:   r1.Value,
		Topic:   "orders.retry.10m",
		Due:     due2,
		Failure: retrytopics.Failure{Class: delivery.ClassTransient, Message: "timeout", At: fail2},
		Group:   "orders-kretry",
		Version: "v1.2.4",
	}
	r2 := m2.Record()
	checkRun(t, r2, originalHeaders())
	for name, want := range map[string]string{
		retrytopics.HeaderAttempt:          "2",
		retrytopics.HeaderStage:            "orders.retry.10m",
		retrytopics.HeaderFirstFailureTime: "2026-01-02T08:04:06.123Z",
		retrytopics.HeaderLastFailureTime:  "2026-01-02T08:05:07.131Z",
		retrytopics.HeaderErrorStatus:      "",
		retrytopics.HeaderErrorMessage:     "timeout",
		retrytopics.HeaderVersion:          "v1.2.4",
	} {
		if got := header(t, r2, name); got != want {
			t.Errorf("hop 2 %s = %q, want %q", name, got, want)
		}
	}
	o2, err := retrytopics.ReadOrigin(consumed(r2, 3), false, 2)
	if err != nil {
		t.Fatalf("ReadOrigin of hop 2: %v", err)
	}
	checkOrigin(t, "hop 2", o2, 2, fail1, due2)

	// Hop 3: tier 2 → DLQ, exhausted: the due time is written empty.
	m3 := retrytopics.Move{
		Origin:  o2,
		Topic:   "orders.dlq",
		Failure: retrytopics.Failure{Class: delivery.ClassExhausted, Status: 500, Message: "boom", At: fail3},
	}
	r3 := m3.Record()
	checkRun(t, r3, originalHeaders())
	if got := header(t, r3, retrytopics.HeaderDueTime); got != "" {
		t.Errorf("DLQ %s = %q, want empty", retrytopics.HeaderDueTime, got)
	}
	if got := header(t, r3, retrytopics.HeaderErrorClass); got != "exhausted" {
		t.Errorf("DLQ %s = %q, want exhausted", retrytopics.HeaderErrorClass, got)
	}
	o3, err := retrytopics.ReadOrigin(consumed(r3, 0), false, 3)
	if err != nil {
		t.Fatalf("ReadOrigin of the DLQ record: %v", err)
	}
	checkOrigin(t, "DLQ", o3, 3, fail1, time.Time{})
}

func checkOrigin(t *testing.T, hop string, o retrytopics.Origin, attempts int64, first, due time.Time) {
	t.Helper()
	if o.Topic != "orders" || o.Partition != 2 || o.Offset != 41 {
		t.Errorf("%s: origin %s, want orders/2/41", hop, o.ID())
	}
	if !o.Timestamp.Equal(msTime(srcTime)) {
		t.Errorf("%s: origin timestamp %v, want %v", hop, o.Timestamp, msTime(srcTime))
	}
	if o.Attempts != attempts {
		t.Errorf("%s: attempts %d, want %d", hop, o.Attempts, attempts)
	}
	if !o.FirstFailure.Equal(msTime(first)) {
		t.Errorf("%s: first failure %v, want %v", hop, o.FirstFailure, msTime(first))
	}
	if !o.Due.Equal(msTime(due)) {
		t.Errorf("%s: due %v, want %v", hop, o.Due, msTime(due))
	}
	if !sameHeaders(o.Headers, originalHeaders()) {
		t.Errorf("%s: original headers %q, want %q", hop, o.Headers, originalHeaders())
	}
}

// TestMoveKeepsBytes checks key and value bytes, including empty and nil, on
// a move.
func TestMoveKeepsBytes(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key, value []byte
	}{
		{"nil key and tombstone", nil, nil},
		{"nil key", nil, []byte("v")},
		{"tombstone", []byte("k"), nil},
		{"empty, not nil", []byte{}, []byte{}},
		{"binary", []byte{0, 0xff, 0x80}, []byte{0xc3, 0x28, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := retrytopics.Move{
				Origin:  retrytopics.Origin{Topic: "orders", Partition: 1, Offset: 9, Timestamp: srcTime},
				Key:     tc.key,
				Value:   tc.value,
				Topic:   "orders.dlq",
				Failure: retrytopics.Failure{Class: delivery.ClassPermanent, Status: 422, At: fail1},
			}
			r := m.Record()
			if (r.Key == nil) != (tc.key == nil) || !bytes.Equal(r.Key, tc.key) {
				t.Errorf("key %#v, want %#v", r.Key, tc.key)
			}
			if (r.Value == nil) != (tc.value == nil) || !bytes.Equal(r.Value, tc.value) {
				t.Errorf("value %#v, want %#v", r.Value, tc.value)
			}
			if r.Partition != 1 {
				t.Errorf("partition %d, want the original 1", r.Partition)
			}
		})
	}
}

// TestMoveReplayedDLQRecord replays a DLQ record into the source: its kretry
// run is now part of its original headers and must survive a hop unchanged.
func TestMoveReplayedDLQRecord(t *testing.T) {
	dead := (&retrytopics.Move{
		Origin:  retrytopics.Origin{Topic: "orders", Partition: 0, Offset: 5, Timestamp: srcTime, Headers: originalHeaders()},
		Topic:   "orders.dlq",
		Failure: retrytopics.Failure{Class: delivery.ClassPermanent, Status: 422, Message: "bad volume", At: fail1},
		Group:   "orders-kretry",
	}).Record()
	replayedHeaders := append([]kgo.RecordHeader(nil), dead.Headers...)

	src := &kgo.Record{Topic: "orders", Partition: 1, Offset: 100, Timestamp: fail3, Value: []byte("v"), Headers: dead.Headers}
	o0, err := retrytopics.ReadOrigin(src, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if o0.Offset != 100 || o0.Attempts != 0 || !sameHeaders(o0.Headers, replayedHeaders) {
		t.Fatalf("origin of the replayed record: %s attempts %d headers %q; want orders/1/100, 0, all its headers", o0.ID(), o0.Attempts, o0.Headers)
	}

	o := o0
	for hop := 1; hop <= 2; hop++ {
		at := fail3.Add(time.Duration(hop) * time.Minute)
		r := (&retrytopics.Move{
			Origin:  o,
			Value:   src.Value,
			Topic:   "orders.retry.1m",
			Due:     at.Add(time.Minute),
			Failure: retrytopics.Failure{Class: delivery.ClassTransient, Status: 503, Message: fmt.Sprintf("hop %d", hop), At: at},
		}).Record()
		checkRun(t, r, replayedHeaders)
		if got := header(t, r, retrytopics.HeaderErrorMessage); got != fmt.Sprintf("hop %d", hop) {
			t.Errorf("hop %d: error message %q", hop, got)
		}
		if o, err = retrytopics.ReadOrigin(consumed(r, int64(hop)), false, int64(hop)); err != nil {
			t.Fatalf("hop %d: %v", hop, err)
		}
		if o.Topic != "orders" || o.Partition != 1 || o.Offset != 100 || o.Attempts != int64(hop) {
			t.Errorf("hop %d: origin %s attempts %d, want orders/1/100 attempts %d", hop, o.ID(), o.Attempts, hop)
		}
		if !o.Timestamp.Equal(msTime(fail3)) {
			t.Errorf("hop %d: origin timestamp %v, want %v", hop, o.Timestamp, msTime(fail3))
		}
		if !sameHeaders(o.Headers, replayedHeaders) {
			t.Errorf("hop %d: original headers\n got %q\nwant %q", hop, o.Headers, replayedHeaders)
		}
	}
}

// tierRecord is a well-formed record on tier 1, as consumed from it.
func tierRecord() *kgo.Record {
	o, _ := retrytopics.ReadOrigin(sourceRecord(), true, 0)
	r := (&retrytopics.Move{
		Origin:  o,
		Topic:   "orders.retry.1m",
		Due:     fail1.Add(time.Minute),
		Failure: retrytopics.Failure{Class: delivery.ClassTransient, Status: 503, Message: "x", At: fail1},
	}).Record()
	r.Partition, r.Offset = 2, 17
	return r
}

func TestReadOriginWithoutRun(t *testing.T) {
	run := tierRecord().Headers[:len(retrytopics.Headers)]
	swapped := append([]kgo.RecordHeader(nil), run...)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	for _, tc := range []struct {
		name    string
		headers []kgo.RecordHeader
	}{
		{"no headers", nil},
		{"only original headers", originalHeaders()},
		{"run cut short", append(append([]kgo.RecordHeader(nil), run[:len(run)-1]...), originalHeaders()...)},
		{"run out of order", append(swapped, originalHeaders()...)},
		{"run after an original header", append(append([]kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}, run...), originalHeaders()...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &kgo.Record{Topic: "orders.retry.1m", Partition: 1, Offset: 9, Timestamp: fail2, Headers: tc.headers}
			o, err := retrytopics.ReadOrigin(r, false, 4)
			if !errors.Is(err, retrytopics.ErrBadHeaders) {
				t.Fatalf("err = %v, want ErrBadHeaders", err)
			}
			if !strings.Contains(err.Error(), "orders.retry.1m/1/9") {
				t.Errorf("err %q does not name the record orders.retry.1m/1/9", err)
			}
			if o.Topic != "orders.retry.1m" || o.Partition != 1 || o.Offset != 9 || !o.Timestamp.Equal(fail2) {
				t.Errorf("origin %s at %v, want the record's own orders.retry.1m/1/9 at %v", o.ID(), o.Timestamp, fail2)
			}
			if o.Attempts != 4 {
				t.Errorf("attempts %d, want the fallback 4", o.Attempts)
			}
			if !o.Due.IsZero() {
				t.Errorf("due %v, want zero (now)", o.Due)
			}
			if !sameHeaders(o.Headers, tc.headers) {
				t.Errorf("headers %q, want all of the record's %q", o.Headers, tc.headers)
			}
		})
	}
}

func TestReadOriginGarbage(t *testing.T) {
	type want struct {
		ownCoords    bool // topic/partition/offset fall back to the record's own
		fallbackAtt  bool // attempts fall back
		timestamp    time.Time
		firstFailure time.Time
		due          time.Time
	}
	good := want{timestamp: msTime(srcTime), firstFailure: msTime(fail1), due: msTime(fail1.Add(time.Minute))}
	with := func(f func(*want)) want { w := good; f(&w); return w }
	for _, tc := range []struct {
		name  string
		set   map[string]string
		names []string // headers the error must name
		want  want
	}{
		{"attempt not a number", map[string]string{retrytopics.HeaderAttempt: "three"}, []string{retrytopics.HeaderAttempt},
			with(func(w *want) { w.fallbackAtt = true })},
		{"attempt negative", map[string]string{retrytopics.HeaderAttempt: "-3"}, []string{retrytopics.HeaderAttempt},
			with(func(w *want) { w.fallbackAtt = true })},
		{"attempt empty", map[string]string{retrytopics.HeaderAttempt: ""}, []string{retrytopics.HeaderAttempt},
			with(func(w *want) { w.fallbackAtt = true })},
		{"attempt past int64", map[string]string{retrytopics.HeaderAttempt: "9223372036854775808"}, []string{retrytopics.HeaderAttempt},
			with(func(w *want) { w.fallbackAtt = true })},
		{"partition not a number", map[string]string{retrytopics.HeaderOriginalPartition: "two"}, []string{retrytopics.HeaderOriginalPartition},
			with(func(w *want) { w.ownCoords = true })},
		{"partition past int32", map[string]string{retrytopics.HeaderOriginalPartition: "2147483648"}, []string{retrytopics.HeaderOriginalPartition},
			with(func(w *want) { w.ownCoords = true })},
		{"partition negative", map[string]string{retrytopics.HeaderOriginalPartition: "-1"}, []string{retrytopics.HeaderOriginalPartition},
			with(func(w *want) { w.ownCoords = true })},
		{"offset not a number", map[string]string{retrytopics.HeaderOriginalOffset: "1e3"}, []string{retrytopics.HeaderOriginalOffset},
			with(func(w *want) { w.ownCoords = true })},
		{"topic empty", map[string]string{retrytopics.HeaderOriginalTopic: ""}, []string{retrytopics.HeaderOriginalTopic},
			with(func(w *want) { w.ownCoords = true })},
		{"timestamp not a time", map[string]string{retrytopics.HeaderOriginalTimestamp: "yesterday"}, []string{retrytopics.HeaderOriginalTimestamp},
			with(func(w *want) { w.timestamp = fail2 })}, // the record's own timestamp
		{"timestamp empty", map[string]string{retrytopics.HeaderOriginalTimestamp: ""}, []string{retrytopics.HeaderOriginalTimestamp},
			with(func(w *want) { w.timestamp = fail2 })},
		{"first failure not a time", map[string]string{retrytopics.HeaderFirstFailureTime: "2026-13-45T99:00:00Z"}, []string{retrytopics.HeaderFirstFailureTime},
			with(func(w *want) { w.firstFailure = time.Time{} })},
		{"due not a time", map[string]string{retrytopics.HeaderDueTime: "tomorrow"}, []string{retrytopics.HeaderDueTime},
			with(func(w *want) { w.due = time.Time{} })},
		{"several at once",
			map[string]string{retrytopics.HeaderAttempt: "x", retrytopics.HeaderOriginalOffset: "y", retrytopics.HeaderDueTime: "z"},
			[]string{retrytopics.HeaderAttempt, retrytopics.HeaderOriginalOffset, retrytopics.HeaderDueTime},
			with(func(w *want) { w.fallbackAtt, w.ownCoords, w.due = true, true, time.Time{} })},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tierRecord()
			r.Timestamp = fail2
			for i := range retrytopics.Headers {
				if v, ok := tc.set[r.Headers[i].Key]; ok {
					r.Headers[i].Value = []byte(v)
				}
			}
			o, err := retrytopics.ReadOrigin(r, false, 4)
			if !errors.Is(err, retrytopics.ErrBadHeaders) {
				t.Fatalf("err = %v, want ErrBadHeaders", err)
			}
			for _, name := range tc.names {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("err %q does not name %s", err, name)
				}
				if v := tc.set[name]; v != "" && !strings.Contains(err.Error(), strconv.Quote(v)) {
					t.Errorf("err %q does not quote the bad value %q", err, v)
				}
			}
			for _, name := range retrytopics.Headers {
				if _, bad := tc.set[name]; !bad && strings.Contains(err.Error(), name+":") {
					t.Errorf("err %q blames the good header %s", err, name)
				}
			}
			w := tc.want
			if w.ownCoords {
				if o.Topic != "orders.retry.1m" || o.Partition != 2 || o.Offset != 17 {
					t.Errorf("origin %s, want the record's own orders.retry.1m/2/17", o.ID())
				}
			} else if o.Topic != "orders" || o.Partition != 2 || o.Offset != 41 {
				t.Errorf("origin %s, want orders/2/41", o.ID())
			}
			if wantAtt := map[bool]int64{false: 1, true: 4}[w.fallbackAtt]; o.Attempts != wantAtt {
				t.Errorf("attempts %d, want %d", o.Attempts, wantAtt)
			}
			if !o.Timestamp.Equal(w.timestamp) {
				t.Errorf("timestamp %v, want %v", o.Timestamp, w.timestamp)
			}
			if !o.FirstFailure.Equal(w.firstFailure) {
				t.Errorf("first failure %v, want %v", o.FirstFailure, w.firstFailure)
			}
			if !o.Due.Equal(w.due) {
				t.Errorf("due %v, want %v", o.Due, w.due)
			}
			if !sameHeaders(o.Headers, originalHeaders()) {
				t.Errorf("headers %q, want the originals %q", o.Headers, originalHeaders())
			}

			// The next hop writes readable headers again.
			next := (&retrytopics.Move{
				Origin: o, Topic: "orders.retry.10m", Due: fail3,
				Failure: retrytopics.Failure{Class: delivery.ClassTransient, At: fail2},
			}).Record()
			if _, err := retrytopics.ReadOrigin(consumed(next, 1), false, 5); err != nil {
				t.Errorf("re-reading the next hop: %v", err)
			}
			checkRun(t, next, originalHeaders())
		})
	}
}

// TestMoveHugeAttempts reads a tier record whose attempt count is the
// largest int64: the next hop must not wrap it negative.
func TestMoveHugeAttempts(t *testing.T) {
	for _, attempts := range []string{"9223372036854775806", "9223372036854775807"} {
		t.Run(attempts, func(t *testing.T) {
			r := tierRecord()
			for i := range r.Headers {
				if r.Headers[i].Key == retrytopics.HeaderAttempt {
					r.Headers[i].Value = []byte(attempts)
				}
			}
			o, err := retrytopics.ReadOrigin(r, false, 1)
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.ParseInt(attempts, 10, 64)
			if o.Attempts != n {
				t.Fatalf("attempts %d, want %d", o.Attempts, n)
			}
			route := testPlan().Route(int(min(o.Attempts, math.MaxInt32)), &delivery.Verdict{Class: delivery.ClassTransient}, 0.5)
			if route.Action != retrytopics.DeadLetter || route.Class != delivery.ClassExhausted {
				t.Fatalf("route %+v, want exhausted", route)
			}
			next := (&retrytopics.Move{
				Origin: o, Topic: route.Topic,
				Failure: retrytopics.Failure{Class: route.Class, At: fail2},
			}).Record()
			got := header(t, next, retrytopics.HeaderAttempt)
			if got != "9223372036854775807" {
				t.Errorf("next attempt %q, want %q (saturated, never negative)", got, "9223372036854775807")
			}
			o2, err := retrytopics.ReadOrigin(consumed(next, 1), false, 1)
			if err != nil {
				t.Fatalf("re-reading the next hop: %v", err)
			}
			if o2.Attempts != math.MaxInt64 {
				t.Errorf("re-read attempts %d, want %d", o2.Attempts, int64(math.MaxInt64))
			}
		})
	}
}

func TestMoveTruncatesErrorMessage(t *testing.T) {
	const maxBytes = 2048
	for _, r := range []string{"a", "é", "€", "😀"} {
		for pad := range 4 {
			t.Run(fmt.Sprintf("%d-byte runes after %d bytes", len(r), pad), func(t *testing.T) {
				msg := strings.Repeat("x", pad) + strings.Repeat(r, (1<<20)/len(r))
				m := retrytopics.Move{
					Origin:   retrytopics.Origin{Topic: "orders", Partition: 0, Offset: 1, Timestamp: srcTime, Headers: originalHeaders()},
					Key:      []byte("key"),
					Value:    bytes.Repeat([]byte("v"), 300),
					Topic:    "orders.dlq",
					Failure:  retrytopics.Failure{Class: delivery.ClassPermanent, Status: 413, Message: msg, At: fail1},
					MaxBytes: maxBytes,
				}
				rec := m.Record()
				got := header(t, rec, retrytopics.HeaderErrorMessage)
				size := retrytopics.RecordSize(rec)
				if size > maxBytes {
					t.Fatalf("RecordSize = %d, above MaxBytes %d", size, maxBytes)
				}
				if size < maxBytes-utf8.UTFMax {
					t.Errorf("RecordSize = %d, wasting room below MaxBytes %d", size, maxBytes)
				}
				if !strings.HasSuffix(got, marker) {
					t.Errorf("message does not end with %q: ...%q", marker, got[max(0, len(got)-30):])
				}
				if !utf8.ValidString(got) {
					t.Errorf("message is not valid UTF-8: ...%q", got[max(0, len(got)-30):])
				}
				if !strings.HasPrefix(msg, strings.TrimSuffix(got, marker)) {
					t.Errorf("message is not a prefix of the error text")
				}
				checkRun(t, rec, originalHeaders())
			})
		}
	}
}

func TestMoveErrorMessageBounds(t *testing.T) {
	base := retrytopics.Move{
		Origin:  retrytopics.Origin{Topic: "orders", Partition: 0, Offset: 1, Timestamp: srcTime},
		Key:     []byte("key"),
		Value:   []byte("value"),
		Topic:   "orders.dlq",
		Failure: retrytopics.Failure{Class: delivery.ClassPermanent, Status: 400, At: fail1},
	}
	// The size of the record with an empty message.
	empty := retrytopics.RecordSize(base.Record())
	huge := strings.Repeat("€", 1<<20)
	for _, tc := range []struct {
		name     string
		message  string
		maxBytes int
		key      []byte
		value    []byte
		want     string // "" with wantCut: check the cut only
		wantCut  int    // when positive: truncated to within this many bytes, ending in the marker
	}{
		{"no limit caps at MaxErrorMessage", huge, 0, nil, nil, "", retrytopics.MaxErrorMessage},
		{"large limit caps at MaxErrorMessage", huge, 10 << 20, nil, nil, "", retrytopics.MaxErrorMessage},
		{"no limit, short message", "boom", 0, nil, nil, "boom", 0},
		{"no limit, exactly MaxErrorMessage", strings.Repeat("a", retrytopics.MaxErrorMessage), 0, nil, nil, strings.Repeat("a", retrytopics.MaxErrorMessage), 0},
		{"no limit, one byte over MaxErrorMessage", strings.Repeat("a", retrytopics.MaxErrorMessage+1), 0, nil, nil, "", retrytopics.MaxErrorMessage},
		{"exact fit", "0123456789abcdefghij", empty + 20, nil, nil, "0123456789abcdefghij", 0},
		{"one byte short", "0123456789abcdefghij", empty + 19, nil, nil, "01234" + marker, 0},
		{"room smaller than the marker", "0123456789abcdefghij", empty + 10, nil, nil, "", 0},
		{"no room at all", "boom", empty, nil, nil, "", 0},
		{"record already too large", "boom", 100, nil, bytes.Repeat([]byte("v"), 200), "", 0},
		{"key and value far over the limit", huge, 2048, bytes.Repeat([]byte("k"), 4096), bytes.Repeat([]byte("v"), 1<<20), "", 0},
		{"limit of one byte", huge, 1, nil, nil, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base
			m.Failure.Message = tc.message
			m.MaxBytes = tc.maxBytes
			if tc.key != nil {
				m.Key = tc.key
			}
			if tc.value != nil {
				m.Value = tc.value
			}
			rec := m.Record()
			got := header(t, rec, retrytopics.HeaderErrorMessage)
			if tc.wantCut > 0 {
				if len(got) > tc.wantCut || len(got) < tc.wantCut-utf8.UTFMax || !strings.HasSuffix(got, marker) || !utf8.ValidString(got) {
					t.Errorf("message of %d bytes (suffix %q), want ≤ %d bytes ending in %q, valid UTF-8", len(got), got[max(0, len(got)-20):], tc.wantCut, marker)
				}
			} else if got != tc.want {
				t.Errorf("message %q, want %q", got, tc.want)
			}
			if tc.maxBytes > 0 && got != "" {
				if size := retrytopics.RecordSize(rec); size > tc.maxBytes {
					t.Errorf("RecordSize = %d, above MaxBytes %d", size, tc.maxBytes)
				}
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	ml := len(marker)
	long := strings.Repeat("a", 100)
	for _, tc := range []struct {
		name string
		s    string
		n    int
		want string
	}{
		{"empty", "", 0, ""},
		{"empty, negative n", "", -1, ""},
		{"n zero", "abc", 0, ""},
		{"n negative", "abc", -5, ""},
		{"min int", "abc", math.MinInt, ""},
		{"fits", "hello", 10, "hello"},
		{"exact fit", "hello", 5, "hello"},
		{"exact fit, multi-byte", "héllo€", len("héllo€"), "héllo€"},
		{"short n, short s", "hello", 4, ""},
		{"n equals the marker", long, ml, ""},
		{"n smaller than the marker", long, ml - 1, ""},
		{"one byte beyond the marker", long, ml + 1, "a" + marker},
		{"one byte short", long, 99, strings.Repeat("a", 99-ml) + marker},
		{"cut inside a 2-byte rune", "aé" + long, ml + 2, "a" + marker},
		{"cut inside a 3-byte rune", "a€" + long, ml + 3, "a" + marker},
		{"cut inside a 4-byte rune", "a😀" + long, ml + 4, "a" + marker},
		{"cut after a 4-byte rune", "a😀" + long, ml + 5, "a😀" + marker},
		{"only a rune before the cut", "😀" + long, ml + 3, marker},
		{"max int", long, math.MaxInt, long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retrytopics.Truncate(tc.s, tc.n); got != tc.want {
				t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
			}
		})
	}
}

// TestTruncateEveryLength cuts a mixed-width string at every length.
func TestTruncateEveryLength(t *testing.T) {
	s := "aé€😀" + strings.Repeat("ü😀€x", 20)
	for n := -1; n <= len(s)+1; n++ {
		got := retrytopics.Truncate(s, n)
		switch {
		case len(s) <= n:
			if got != s {
				t.Fatalf("Truncate(s, %d) = %q, want s unchanged", n, got)
			}
		case len(got) > max(n, 0):
			t.Fatalf("Truncate(s, %d) has %d bytes", n, len(got))
		case !utf8.ValidString(got):
			t.Fatalf("Truncate(s, %d) = %q, not valid UTF-8", n, got)
		case got != "" && (!strings.HasSuffix(got, marker) || !strings.HasPrefix(s, strings.TrimSuffix(got, marker))):
			t.Fatalf("Truncate(s, %d) = %q, not a prefix of s and the marker", n, got)
		case n > len(marker)+utf8.UTFMax && len(got) < n-utf8.UTFMax+1:
			t.Fatalf("Truncate(s, %d) = %d bytes, cut more than a rune short", n, len(got))
		}
	}
}

// TestReadOriginZeroTimestamp: a source record without a timestamp is
// written as the zero time, which reads back as such, without error.
func TestReadOriginZeroTimestamp(t *testing.T) {
	r := (&retrytopics.Move{
		Origin:  retrytopics.Origin{Topic: "orders", Partition: 0, Offset: 3},
		Topic:   "orders.retry.1m",
		Due:     fail2,
		Failure: retrytopics.Failure{Class: delivery.ClassTransient, At: fail1},
	}).Record()
	if got := header(t, r, retrytopics.HeaderOriginalTimestamp); got != "0001-01-01T00:00:00.000Z" {
		t.Errorf("%s = %q", retrytopics.HeaderOriginalTimestamp, got)
	}
	o, err := retrytopics.ReadOrigin(consumed(r, 8), false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Timestamp.IsZero() {
		t.Errorf("timestamp %v, want the zero time", o.Timestamp)
	}
}
