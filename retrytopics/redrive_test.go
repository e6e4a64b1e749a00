package retrytopics_test

import (
	"bytes"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// dlqRecord builds a DLQ record the way the engine does.
func dlqRecord(t *testing.T, o retrytopics.Origin, key, value []byte) *kgo.Record {
	t.Helper()
	m := retrytopics.Move{Origin: o, Key: key, Value: value, Topic: "orders.dlq", Group: "orders-kretry", Version: "v1",
		Failure: retrytopics.Failure{Class: delivery.ClassPermanent, Status: 422, Message: "bad order", At: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}}
	r := m.Record()
	r.Offset = 7
	return r
}

func TestRedriveRecordKeepsBytesAndStartsAfresh(t *testing.T) {
	orig := []kgo.RecordHeader{{Key: "b", Value: []byte{0, 0xff}}, {Key: "b", Value: nil}, {Key: "kretry-redrive-count", Value: []byte("x")}}
	o := retrytopics.Origin{Topic: "orders", Partition: 2, Offset: 41, Timestamp: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC),
		Attempts: 3, FirstFailure: time.Date(2026, 11, 30, 9, 1, 0, 0, time.UTC), Headers: orig}
	key, value := []byte{0x00, 0x01, 0xfe}, []byte(nil)
	d := dlqRecord(t, o, key, value)
	rd := retrytopics.Redrive{Tier: "orders.retry.1m", ID: "rd-1", Version: "v2"}
	now := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	r, err := rd.Record(d, now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "orders.retry.1m" || r.Partition != d.Partition || !bytes.Equal(r.Key, key) || r.Value != nil || !r.Timestamp.Equal(now) {
		t.Fatalf("record: topic %s partition %d key %x value %v ts %v", r.Topic, r.Partition, r.Key, r.Value, r.Timestamp)
	}
	for name, want := range map[string]string{
		retrytopics.HeaderAttempt: "0", retrytopics.HeaderStage: "orders.retry.1m", retrytopics.HeaderDueTime: "2026-12-01T11:00:00.000Z",
		retrytopics.HeaderErrorClass: "permanent", retrytopics.HeaderErrorStatus: "422", retrytopics.HeaderErrorMessage: "bad order",
		retrytopics.HeaderLastFailureTime: "2026-12-01T10:00:00.000Z", retrytopics.HeaderFirstFailureTime: "2026-11-30T09:01:00.000Z",
		retrytopics.HeaderVersion: "v2",
	} {
		if got := header(t, r, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	got, err := retrytopics.ReadOrigin(r, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID() != "orders/2/41" || got.Attempts != 0 || got.Redrives != 1 || got.RedriveID != "rd-1" || !got.Due.Equal(now) {
		t.Fatalf("origin %s attempts %d redrives %d id %q due %v", got.ID(), got.Attempts, got.Redrives, got.RedriveID, got.Due)
	}
	if !sameHeaders(got.Headers, orig) {
		t.Fatalf("headers %v, want %v", got.Headers, orig)
	}

	// Dead-lettered again by the engine: the count is kept; a second
	// redrive counts 2.
	again := dlqRecord(t, got, key, value)
	back, err := retrytopics.ReadDLQRecord(again)
	if err != nil {
		t.Fatal(err)
	}
	if back.Redrives != 1 || back.RedriveID != "rd-1" || back.Status != 422 || back.Stage != "orders.dlq" {
		t.Fatalf("back in the DLQ: %+v", back)
	}
	if !sameHeaders(back.Headers, orig) {
		t.Fatalf("headers back %v, want %v", back.Headers, orig)
	}
	rd.ID = "rd-2"
	r2, err := rd.Record(again, now)
	if err != nil {
		t.Fatal(err)
	}
	if o2, _ := retrytopics.ReadOrigin(r2, false, 0); o2.Redrives != 2 || o2.RedriveID != "rd-2" {
		t.Fatalf("second redrive: redrives %d id %q", o2.Redrives, o2.RedriveID)
	}
}

func TestRedriveRecordRefusesForgedHeaders(t *testing.T) {
	for name, hs := range map[string][]kgo.RecordHeader{
		"none":    nil,
		"partial": {{Key: retrytopics.HeaderAttempt, Value: []byte("1")}},
	} {
		r := &kgo.Record{Topic: "orders.dlq", Value: []byte("x"), Headers: hs}
		if _, err := (&retrytopics.Redrive{Tier: "t"}).Record(r, time.Now()); !errors.Is(err, retrytopics.ErrBadHeaders) {
			t.Errorf("%s: err = %v, want ErrBadHeaders", name, err)
		}
	}
	// A full run with a garbage offset.
	d := dlqRecord(t, retrytopics.Origin{Topic: "orders", Offset: 1}, nil, nil)
	for i, h := range d.Headers {
		if h.Key == retrytopics.HeaderOriginalOffset {
			d.Headers[i].Value = []byte("-x")
		}
	}
	if _, err := (&retrytopics.Redrive{Tier: "t"}).Record(d, time.Now()); !errors.Is(err, retrytopics.ErrBadHeaders) {
		t.Errorf("garbage offset: err = %v, want ErrBadHeaders", err)
	}
}

// TestRedriveRecordForgedCounts: a DLQ record whose kretry-redrive-count
// is forged (written by hand, or a count at the int64 limit) is redriven
// with a readable count of at least 1 and the new redrive id, never with
// the redrive headers dropped (a count that wrapped to a negative value
// would lose them, and the engine would no longer see the record as
// redriven); an unreadable pair stays, byte for byte, an original header.
func TestRedriveRecordForgedCounts(t *testing.T) {
	ts := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	rd := retrytopics.Redrive{Tier: "orders.retry.1m", ID: "rd-new", Version: "v2"}
	now := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		redrives  int64 // Origin.Redrives written by the engine
		forged    string
		wantCount int64
	}{
		{name: "at the int64 limit", redrives: math.MaxInt64, wantCount: math.MaxInt64},
		{name: "minus one", forged: "-1", wantCount: 1},
		{name: "past int64", forged: "99999999999999999999", wantCount: 1},
		{name: "not a number", forged: "many", wantCount: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var orig []kgo.RecordHeader
			if tc.forged != "" {
				orig = []kgo.RecordHeader{{Key: retrytopics.HeaderRedriveCount, Value: []byte(tc.forged)}, {Key: retrytopics.HeaderRedriveID, Value: []byte("forged")}}
			}
			o := retrytopics.Origin{Topic: "orders", Partition: 0, Offset: 3, Timestamp: ts, Attempts: 2, Headers: orig,
				Redrives: tc.redrives, RedriveID: "old"}
			r, err := rd.Record(dlqRecord(t, o, []byte("k"), []byte("v")), now)
			if err != nil {
				t.Fatal(err)
			}
			got, err := retrytopics.ReadOrigin(r, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got.Redrives != tc.wantCount || got.RedriveID != "rd-new" {
				t.Fatalf("redrives %d id %q, want %d and rd-new", got.Redrives, got.RedriveID, tc.wantCount)
			}
			if !sameHeaders(got.Headers, orig) {
				t.Fatalf("original headers %v, want %v", got.Headers, orig)
			}
		})
	}
}
