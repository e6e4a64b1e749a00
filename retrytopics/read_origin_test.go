package retrytopics_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

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
