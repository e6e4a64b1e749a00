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
			if l["repeated_until"] != last {
				t.Errorf("window %d: repeated_until=%v, want %s (the last line held back)", i+1, l["repeated_until"], last)
			}
			end := start.Add(time.Duration(i+1) * RepeatWindow).UTC().Format(time.RFC3339Nano)
			if l["time"] != end {
				t.Errorf("window %d: the count is shown at %v, want the window's end, %s, so the log stays in order", i+1, l["time"], end)
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

// The kinds tracked are bounded. A line seen once makes room when the
// table is full, so a burst of one-off lines does not stop a steady
// repeat from being held; 256 kinds that all repeat fill it, and a new
// kind is then shown and not tracked. A window that ends with nothing
// held forgets its kind.
func TestQuietRepeatsBoundsItsKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		h := newQuietRepeats(slog.NewJSONHandler(&buf, nil), RepeatWindow)
		log := slog.New(h)
		steady := 0
		// 20 one-off lines a second for 30s; from 15s on, when they have
		// filled the table, a steady repeat too.
		for i := range 20 * 30 {
			log.Error("fetch failed", "group", fmt.Sprint("group-", i))
			if i >= 300 && i%5 == 0 {
				log.Warn("unable to open connection to broker", "broker", "1")
				steady++
			}
			time.Sleep(50 * time.Millisecond)
		}
		shown := 0
		for _, l := range jsonLines(t, &buf) {
			if l["msg"] == "unable to open connection to broker" {
				shown++
			}
		}
		if shown > 2 {
			t.Errorf("the steady repeat was shown %d times of %d within its window amid one-off lines that filled the table, want 1 (and its count)", shown, steady)
		}
		time.Sleep(2 * RepeatWindow) // the steady kind's window ends at 45s; the next, with nothing held, at 75s
		if n := h.kinds.tracked(); n != 0 {
			t.Errorf("%d kinds still tracked after their windows ended with nothing held, want 0", n)
		}

		for i := range maxRepeatKinds { // all repeating: the table fills
			log.Warn("commit failed", "group", fmt.Sprint("group-", i))
			log.Warn("commit failed", "group", fmt.Sprint("group-", i))
		}
		if n := h.kinds.tracked(); n != maxRepeatKinds {
			t.Errorf("%d kinds tracked, want %d", n, maxRepeatKinds)
		}
		before := len(jsonLines(t, &buf))
		log.Warn("a new kind")
		log.Warn("a new kind")
		if n := len(jsonLines(t, &buf)) - before; n != 2 {
			t.Errorf("%d of 2 lines of a new kind shown with the table full, want both", n)
		}
	})
}

// Lines that differ only in a number that is not an identity (a local
// port, a count, a partition) are one kind; a different group, topic or
// error code is another, shown at once.
func TestQuietRepeatsKinds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		log := slog.New(newQuietRepeats(slog.NewJSONHandler(&buf, nil), RepeatWindow))
		for port := range 50 { // DNS down: a new local port in each error
			log.Warn("unable to open connection to broker", "broker", "seed_0",
				"err", fmt.Sprintf("dial tcp: lookup kafka-0 on 10.0.0.53:53: read udp 127.0.0.1:%d->10.0.0.53:53: read: connection refused", 40000+port))
			log.Error("group manage loop errored", "group", "orders-kretry", "err", "unable to dial", "consecutive_errors", port, "backoff", fmt.Sprintf("%dms", 100*port))
		}
		if n := len(jsonLines(t, &buf)); n != 2 {
			t.Fatalf("%d lines shown for 100, want 2 (a port or a count is no kind of its own):\n%s", n, buf.String())
		}
		before := len(jsonLines(t, &buf))
		log.Error("group manage loop errored", "group", "payments-kretry", "err", "unable to dial", "consecutive_errors", 1, "backoff", "100ms")
		log.Warn("unable to commit offset for topic partition", "group", "orders-kretry", "topic", "orders", "partition", 0, "error_code", 27)
		log.Warn("unable to commit offset for topic partition", "group", "orders-kretry", "topic", "orders", "partition", 0, "error_code", 22)
		log.Warn("unable to commit offset for topic partition", "group", "orders-kretry", "topic", "orders", "partition", 1, "error_code", 22) // held: another partition only
		log.Warn("unable to commit offset for topic partition", "group", "orders-kretry", "topic", "orders.dlq", "partition", 1, "error_code", 22)
		log.Warn("unable to commit offset for topic partition", "group", "payments-kretry", "topic", "payments", "partition", 1, "error_code", 22)
		if n := len(jsonLines(t, &buf)) - before; n != 5 {
			t.Errorf("%d lines shown, want 5 (another group, error code, topic: each its own kind; another partition is not):\n%s", n, buf.String())
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

// Steady kinds repeating once a second keep being held while one-off
// lines overflow the table (300 a second): only the oldest empty window
// makes room. Closing every empty window closed the steady kinds' windows
// just reopened, and all 2,400 of their lines were shown (a breaker
// round's table).
func TestQuietRepeatsHoldsSteadyKindsAmidOneOffs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		log := slog.New(newQuietRepeats(slog.NewJSONHandler(&buf, nil), RepeatWindow))
		oneOff := 0
		for range 120 {
			for k := range 20 {
				log.Warn("unable to commit offset for topic partition", "topic", fmt.Sprint("topic-", k))
			}
			for range 300 {
				log.Error("fetch failed", "group", fmt.Sprint("group-", oneOff))
				oneOff++
			}
			time.Sleep(time.Second)
		}
		shown := 0
		for _, l := range jsonLines(t, &buf) {
			if l["msg"] == "unable to commit offset for topic partition" {
				shown++
			}
		}
		// Ideally 20 × (1 + 4 windows) = 100; eviction of the oldest empty
		// window costs a few more.
		t.Logf("%d of 2,400 steady lines shown", shown)
		if shown > 200 {
			t.Errorf("%d of 2,400 steady lines shown amid one-off lines, want at most 200", shown)
		}
	})
}

// Loggers derived with other attributes are other kinds, and the count of
// each comes out through its own logger.
func TestQuietRepeatsDerivedLoggers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testlog.Buffer
		base := slog.New(newQuietRepeats(slog.NewJSONHandler(&buf, nil), RepeatWindow))
		a, b := base.With("client", "consumer"), base.With("client", "producer")
		for range 3 {
			a.Warn("unable to open connection to broker", "broker", "1")
			b.Warn("unable to open connection to broker", "broker", "1")
		}
		time.Sleep(RepeatWindow + time.Millisecond)
		got := map[string]float64{}
		for _, l := range jsonLines(t, &buf) {
			if n, ok := l["repeated"].(float64); ok {
				got[l["client"].(string)] = n
			}
		}
		if got["consumer"] != 2 || got["producer"] != 2 || len(jsonLines(t, &buf)) != 4 {
			t.Errorf("want each logger's first line and its own count (repeated=2); got\n%s", buf.String())
		}
	})
}
