package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/testlog"
	"github.com/kretry/kretry/pkg/config"
)

// tracked is how many kinds ks counts.
func (ks *repeatKinds) tracked() int {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return len(ks.seen)
}

// jsonLines decodes buf's JSON log lines.
func jsonLines(t *testing.T, buf *testlog.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// A dial failing every 275ms for 70s (254 lines) is shown four times:
// at once, then at the end of each 30s window the last line held in it,
// with the count; the counts add up to every line held back.
func TestQuietRepeatsShowsOnePerWindowWithTheCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		log := slog.New(newQuietRepeats(slog.NewJSONHandler(&buf, nil), RepeatWindow)).With("component", "kafka-client")
		start := time.Now()
		const every = 275 * time.Millisecond
		for range 254 {
			log.Warn("unable to open connection to broker", "broker", "1", "err", "connection refused")
			time.Sleep(every)
		}
		time.Sleep(RepeatWindow) // past the last window's end
		lines := jsonLines(t, &buf)
		if len(lines) != 4 {
			t.Fatalf("%d lines shown for 254 repeats over 70s, want 4 (the first, then one per 30s window):\n%s", len(lines), buf.String())
		}
		if _, ok := lines[0]["repeated"]; ok {
			t.Errorf("the first line carries a count: %v", lines[0])
		}
		// Windows [0,30s), [30s,60s), [60s,90s): lines 1-109, 110-218 and
		// 219-253 held back.
		for i, w := range []struct{ held, first int }{{109, 1}, {109, 110}, {35, 219}} {
			l := lines[i+1]
			if l["repeated"] != float64(w.held) {
				t.Errorf("window %d: repeated=%v, want %d", i+1, l["repeated"], w.held)
			}
			since := start.Add(time.Duration(w.first) * every).UTC().Format(time.RFC3339Nano)
			if l["repeated_since"] != since {
				t.Errorf("window %d: repeated_since=%v, want %s (the first line held back)", i+1, l["repeated_since"], since)
			}
			last := start.Add(time.Duration(w.first+w.held-1) * every).UTC().Format(time.RFC3339Nano)
			if l["time"] != last {
				t.Errorf("window %d: the line shown is of %v, want the last held back, of %s", i+1, l["time"], last)
			}
			if l["component"] != "kafka-client" {
				t.Errorf("window %d: the line lost the logger's attributes: %v", i+1, l)
			}
		}
	})
}

// Lines of another kind (broker, error, message or level) are shown at
// once: only a repeat of the same warn or error line is held back.
func TestQuietRepeatsShowsEachKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		log := slog.New(newQuietRepeats(slog.NewJSONHandler(&buf, nil), RepeatWindow))
		log.Warn("unable to open connection to broker", "broker", "1", "err", "connection refused")
		log.Warn("unable to open connection to broker", "broker", "1", "err", "connection refused") // held
		log.Warn("unable to open connection to broker", "broker", "2", "err", "connection refused")
		log.Warn("unable to open connection to broker", "broker", "1", "err", "i/o timeout")
		log.Warn("join group failed", "broker", "1", "err", "connection refused")
		log.Error("unable to open connection to broker", "broker", "1", "err", "connection refused")
		log.Info("metadata update triggered", "why", "fetch error")
		log.Info("metadata update triggered", "why", "fetch error") // info: log.level debug, all shown
		if n := len(jsonLines(t, &buf)); n != 7 {
			t.Errorf("%d lines shown, want 7 (every kind once, the one warn repeat held back, both info lines):\n%s", n, buf.String())
		}
	})
}

// Repeats that stop within a window are counted when it ends; the kind's
// next line, an hour later, is shown at once.
func TestQuietRepeatsCountsWhenTheWindowEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		log := slog.New(newQuietRepeats(slog.NewJSONHandler(&buf, nil), RepeatWindow))
		for range 5 {
			log.Warn("unable to open connection to broker", "broker", "1")
		}
		if n := len(jsonLines(t, &buf)); n != 1 {
			t.Fatalf("%d lines shown at once, want 1", n)
		}
		time.Sleep(time.Hour)
		log.Warn("unable to open connection to broker", "broker", "1")
		lines := jsonLines(t, &buf)
		if len(lines) != 3 || lines[1]["repeated"] != float64(4) || lines[2]["repeated"] != nil {
			t.Errorf("want the first line, the window's count (repeated=4) at its end, and the line an hour later alone; got\n%s", buf.String())
		}
	})
}

// The kinds tracked are bounded: past maxRepeatKinds a new kind is shown
// and not tracked, and a window that ends with nothing held forgets its
// kind.
func TestQuietRepeatsBoundsItsKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		h := newQuietRepeats(slog.NewJSONHandler(&buf, nil), RepeatWindow)
		log := slog.New(h)
		for i := range maxRepeatKinds + 10 {
			log.Warn("fetch failed", "err", fmt.Sprint("error ", i))
		}
		if n := h.kinds.tracked(); n != maxRepeatKinds {
			t.Errorf("%d kinds tracked, want %d", n, maxRepeatKinds)
		}
		if n := len(jsonLines(t, &buf)); n != maxRepeatKinds+10 {
			t.Errorf("%d lines shown, want %d (every new kind)", n, maxRepeatKinds+10)
		}
		time.Sleep(RepeatWindow + time.Millisecond)
		if n := h.kinds.tracked(); n != 0 {
			t.Errorf("%d kinds still tracked after their windows ended with nothing held, want 0", n)
		}
		log.Warn("fetch failed", "err", "a new one")
		if n := h.kinds.tracked(); n != 1 {
			t.Error("a new kind is not tracked after the others' windows ended")
		}
	})
}

// The Kafka clients kretry builds log through it: franz-go's own dial
// failure, repeated, is shown once.
func TestClientOptsQuietRepeats(t *testing.T) {
	var buf testlog.Buffer
	opts, err := ClientOpts(&config.Kafka{ClientID: "kretry"}, slog.New(slog.NewJSONHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	l := cl.OptValue(kgo.WithLogger).(kgo.Logger)
	for range 10 {
		l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "broker", "seed_0", "err", errors.New("connection refused"))
	}
	var n int
	for _, m := range jsonLines(t, &buf) {
		if m["msg"] == "unable to open connection to broker" && m["err"] == "connection refused" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of 10 repeats shown, want 1:\n%s", n, buf.String())
	}
}
