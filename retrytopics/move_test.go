package retrytopics_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

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
