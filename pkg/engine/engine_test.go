package engine

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

func rec(key, value string) *kgo.Record {
	return &kgo.Record{Key: []byte(key), Value: []byte(value)}
}

func TestSuccessPath(t *testing.T) {
	e := newEnv(t, 3, 100*time.Millisecond, 300*time.Millisecond)
	var recs []*kgo.Record
	for i := range 30 {
		r := rec("k"+strconv.Itoa(i%7), "v"+strconv.Itoa(i))
		r.Partition = int32(i % 3)
		recs = append(recs, r)
	}
	e.produce(recs...)
	eng, _ := e.start(e.options(e.app))
	eventually(t, "30 records acknowledged", func() bool { return e.app.numAcked() == 30 })
	eventually(t, "30 deliveries counted", func() bool { return eng.Stats().Delivered.Load() == 30 })
	for _, r := range recs {
		cs := e.app.callsFor(id(e.plan.Source, r.Partition, r.Offset))
		if len(cs) != 1 || cs[0].msg.Attempt != 1 || !bytes.Equal(cs[0].msg.Value, r.Value) || !bytes.Equal(cs[0].msg.Key, r.Key) {
			t.Fatalf("record %d/%d: deliveries %+v", r.Partition, r.Offset, cs)
		}
	}
	for _, topic := range []string{e.plan.Tiers[0].Topic, e.plan.Tiers[1].Topic, e.plan.DLQ} {
		if n := e.endOffset(topic); n != 0 {
			t.Errorf("%s has end offset %d, want 0", topic, n)
		}
	}
}

func TestPermanentGoesToDLQWithHeadersAndNoRetryWrite(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond, 300*time.Millisecond)
	e.app.setAnswer(func(*delivery.Message) error { return &delivery.StatusError{Status: 422, Body: "bad volume"} })
	in := rec("order-1", `{"volume":""}`)
	in.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}
	in.Timestamp = time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)
	e.produce(in)
	start := time.Now()
	eng, _ := e.start(e.options(e.app))
	eventually(t, "one record dead-lettered", func() bool { return eng.Stats().Permanent.Load() == 1 })

	dlq := e.readAll(e.plan.DLQ)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d records, want 1", len(dlq))
	}
	d := dlq[0]
	want := map[string]string{
		retrytopics.HeaderAttempt:           "1",
		retrytopics.HeaderStage:             e.plan.DLQ,
		retrytopics.HeaderDueTime:           "",
		retrytopics.HeaderOriginalTopic:     e.plan.Source,
		retrytopics.HeaderOriginalPartition: "0",
		retrytopics.HeaderOriginalOffset:    "0",
		retrytopics.HeaderOriginalTimestamp: "2026-01-02T03:04:05.006Z",
		retrytopics.HeaderErrorClass:        "permanent",
		retrytopics.HeaderErrorStatus:       "422",
		retrytopics.HeaderErrorMessage:      "status 422: bad volume",
		retrytopics.HeaderGroup:             e.group(),
		retrytopics.HeaderVersion:           flow.Version,
	}
	for k, v := range want {
		if got, ok := header(d, k); !ok || got != v {
			t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	for _, k := range []string{retrytopics.HeaderFirstFailureTime, retrytopics.HeaderLastFailureTime} {
		s, _ := header(d, k)
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil || ts.Before(start.Add(-time.Second)) || ts.After(time.Now()) {
			t.Errorf("header %s = %q: not a time of this run", k, s)
		}
	}
	if got := d.Headers[len(retrytopics.Headers):]; len(got) != 1 || got[0].Key != "trace" || string(got[0].Value) != "abc" {
		t.Errorf("original headers after the kretry run = %v", got)
	}
	if string(d.Key) != "order-1" || string(d.Value) != `{"volume":""}` {
		t.Errorf("key/value changed: %q %q", d.Key, d.Value)
	}
	for _, tier := range e.plan.Tiers {
		if n := e.endOffset(tier.Topic); n != 0 {
			t.Errorf("permanent failure wrote to %s (end offset %d)", tier.Topic, n)
		}
	}
	if n := len(e.app.callsFor(id(e.plan.Source, 0, 0))); n != 1 {
		t.Errorf("app saw %d deliveries, want 1", n)
	}
}

func TestTransientRetriesOnceAfterDueTime(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond, 300*time.Millisecond)
	e.app.setAnswer(func(m *delivery.Message) error {
		if m.Attempt == 1 {
			return &delivery.StatusError{Status: 503}
		}
		return nil
	})
	e.produce(rec("k", "v"))
	eng, _ := e.start(e.options(e.app))
	eventually(t, "acknowledged on retry", func() bool { return e.app.numAcked() == 1 })
	cs := e.app.callsFor(id(e.plan.Source, 0, 0))
	if len(cs) != 2 {
		t.Fatalf("%d deliveries, want 2", len(cs))
	}
	if cs[1].msg.Attempt != 2 || cs[1].msg.ID != cs[0].msg.ID {
		t.Errorf("retry attempt %d id %q, want 2 and %q", cs[1].msg.Attempt, cs[1].msg.ID, cs[0].msg.ID)
	}
	if gap := cs[1].at.Sub(cs[0].at); gap < 100*time.Millisecond {
		t.Errorf("retried after %v, before the 100ms tier delay", gap)
	}
	if n := eng.Stats().Retried[0].Load(); n != 1 {
		t.Errorf("Retried[0] = %d, want 1", n)
	}
	tier := e.readAll(e.plan.Tiers[0].Topic)
	if len(tier) != 1 {
		t.Fatalf("tier 1 holds %d records, want 1", len(tier))
	}
	due, _ := header(tier[0], retrytopics.HeaderDueTime)
	last, _ := header(tier[0], retrytopics.HeaderLastFailureTime)
	dt, err1 := time.Parse(time.RFC3339Nano, due)
	lt, err2 := time.Parse(time.RFC3339Nano, last)
	if err1 != nil || err2 != nil || dt.Sub(lt) < 100*time.Millisecond {
		t.Errorf("due %q is not ≥ 100ms after the failure %q", due, last)
	}
	if cs[1].at.Before(dt) {
		t.Errorf("delivered at %v, before its due time %v", cs[1].at, dt)
	}
	if n := e.endOffset(e.plan.DLQ); n != 0 {
		t.Errorf("DLQ end offset %d, want 0", n)
	}
}

func TestAlwaysTransientExhaustsTiersThenDLQ(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond, 200*time.Millisecond)
	e.app.setAnswer(func(*delivery.Message) error { return &delivery.StatusError{Status: 503} })
	e.produce(rec("k", "v"))
	eng, _ := e.start(e.options(e.app))
	eventually(t, "exhausted", func() bool { return eng.Stats().Exhausted.Load() == 1 })
	cs := e.app.callsFor(id(e.plan.Source, 0, 0))
	if len(cs) != 3 {
		t.Fatalf("%d deliveries, want tiers+1 = 3", len(cs))
	}
	for i, c := range cs {
		if c.msg.Attempt != i+1 {
			t.Errorf("delivery %d has attempt %d", i, c.msg.Attempt)
		}
	}
	// The due time is wall-clock milliseconds (kretry-due-time), the
	// app's readings are monotonic: NTP slewing (up to 500ppm) moves the
	// two apart by up to 0.1ms over 200ms (a make test run saw 199.948ms), so
	// the gap is checked to the millisecond.
	if gap := cs[2].at.Sub(cs[1].at); gap < 199*time.Millisecond {
		t.Errorf("tier 2 delivered %v after tier 1, before its 200ms delay", gap)
	}
	dlq := e.readAll(e.plan.DLQ)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(dlq))
	}
	for k, v := range map[string]string{
		retrytopics.HeaderErrorClass:  "exhausted",
		retrytopics.HeaderAttempt:     "3",
		retrytopics.HeaderErrorStatus: "503",
	} {
		if got, _ := header(dlq[0], k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	first, _ := header(dlq[0], retrytopics.HeaderFirstFailureTime)
	last, _ := header(dlq[0], retrytopics.HeaderLastFailureTime)
	if first >= last {
		t.Errorf("first failure %s is not before last failure %s", first, last)
	}
	// Error headers are replaced per hop, not appended.
	n := 0
	for _, h := range dlq[0].Headers {
		if h.Key == retrytopics.HeaderErrorMessage {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d error-message headers, want 1", n)
	}
}

func TestClassChangeDeadLettersRightAfterPermanent(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond, 200*time.Millisecond)
	e.app.setAnswer(func(m *delivery.Message) error {
		if m.Attempt == 1 {
			return &delivery.StatusError{Status: 503}
		}
		return &delivery.StatusError{Status: 422}
	})
	e.produce(rec("k", "v"))
	eng, _ := e.start(e.options(e.app))
	eventually(t, "dead-lettered", func() bool { return eng.Stats().Permanent.Load() == 1 })
	time.Sleep(300 * time.Millisecond) // a wrong extra hop would show by now
	if n := len(e.app.callsFor(id(e.plan.Source, 0, 0))); n != 2 {
		t.Errorf("%d deliveries, want 2", n)
	}
	if n := e.endOffset(e.plan.Tiers[1].Topic); n != 0 {
		t.Errorf("tier 2 end offset %d, want 0", n)
	}
	dlq := e.readAll(e.plan.DLQ)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(dlq))
	}
	if c, _ := header(dlq[0], retrytopics.HeaderErrorClass); c != "permanent" {
		t.Errorf("class %q, want permanent", c)
	}
	if a, _ := header(dlq[0], retrytopics.HeaderAttempt); a != "2" {
		t.Errorf("attempt %q, want 2", a)
	}
}

func TestBytesAreSacred(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	e.app.setAnswer(func(m *delivery.Message) error {
		if m.Attempt == 1 {
			return delivery.Transient(errors.New("once more"))
		}
		return delivery.Permanent(errors.New("no"))
	})
	binHeaders := []kgo.RecordHeader{
		{Key: "a", Value: []byte{0x00, 0xff, 0xfe}},
		{Key: "dup", Value: []byte("1")},
		{Key: "", Value: []byte{}},
		{Key: "dup", Value: []byte("2")},
		{Key: "\xff\x00key", Value: []byte("\x80")},
	}
	tomb := &kgo.Record{Key: []byte("gone"), Value: nil, Headers: binHeaders}
	nullKey := &kgo.Record{Key: nil, Value: []byte{0, 1, 2, 0xff}, Headers: binHeaders}
	empty := &kgo.Record{Key: []byte{}, Value: []byte{}}
	e.produce(tomb, nullKey, empty)
	eng, _ := e.start(e.options(e.app))
	eventually(t, "3 dead-lettered", func() bool { return eng.Stats().Permanent.Load() == 3 })

	// As delivered: the app sees the original bytes on every attempt.
	for _, in := range []*kgo.Record{tomb, nullKey, empty} {
		cs := e.app.callsFor(id(e.plan.Source, 0, in.Offset))
		if len(cs) != 2 {
			t.Fatalf("offset %d: %d deliveries, want 2", in.Offset, len(cs))
		}
		for _, c := range cs {
			if (c.msg.Key == nil) != (in.Key == nil) || !bytes.Equal(c.msg.Key, in.Key) ||
				(c.msg.Value == nil) != (in.Value == nil) || !bytes.Equal(c.msg.Value, in.Value) {
				t.Errorf("offset %d attempt %d: key %v value %v, want %v %v", in.Offset, c.msg.Attempt, c.msg.Key, c.msg.Value, in.Key, in.Value)
			}
			if !sameHeaders(c.msg.Headers, in.Headers) {
				t.Errorf("offset %d attempt %d: headers %v, want %v", in.Offset, c.msg.Attempt, c.msg.Headers, in.Headers)
			}
		}
	}
	// As stored in the DLQ.
	dlq := e.readAll(e.plan.DLQ)
	if len(dlq) != 3 {
		t.Fatalf("DLQ holds %d, want 3", len(dlq))
	}
	for _, d := range dlq {
		off, _ := header(d, retrytopics.HeaderOriginalOffset)
		n, _ := strconv.Atoi(off)
		in := []*kgo.Record{tomb, nullKey, empty}[n]
		if (d.Key == nil) != (in.Key == nil) || !bytes.Equal(d.Key, in.Key) {
			t.Errorf("offset %d: DLQ key %v, want %v", n, d.Key, in.Key)
		}
		if (d.Value == nil) != (in.Value == nil) || !bytes.Equal(d.Value, in.Value) {
			t.Errorf("offset %d: DLQ value %v (nil %v), want %v (nil %v)", n, d.Value, d.Value == nil, in.Value, in.Value == nil)
		}
		if !sameHeaders(d.Headers[len(retrytopics.Headers):], in.Headers) {
			t.Errorf("offset %d: DLQ original headers %v, want %v", n, d.Headers[len(retrytopics.Headers):], in.Headers)
		}
	}
}

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
