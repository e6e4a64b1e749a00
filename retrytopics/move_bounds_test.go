package retrytopics_test

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

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
