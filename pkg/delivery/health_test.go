package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kretry/kretry/internal/testlog"
	"github.com/kretry/kretry/pkg/delivery"
)

// logLines captures a Health's log as parsed JSON lines.
type logLines struct{ testlog.Buffer }

func (l *logLines) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(l.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func newTestHealth(next delivery.Deliverer) (*delivery.Health, *logLines) {
	l := &logLines{}
	h := delivery.NewHealth(next, delivery.HealthConfig{
		Target: "http://127.0.0.1:8080/kafka",
		Logger: slog.New(slog.NewJSONHandler(l, nil)),
	})
	return h, l
}

var (
	errRefus = fmt.Errorf("Post \"http://127.0.0.1:8080/kafka\": %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	errDNS   = fmt.Errorf("Post \"http://app:8080/kafka\": %w", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "app", IsNotFound: true}})
	errTime  = fmt.Errorf("Post \"http://127.0.0.1:8080/kafka\": %w", context.DeadlineExceeded)
	err404   = &delivery.StatusError{Status: 404, Body: "not found"}
	err503   = &delivery.StatusError{Status: 503, Body: "busy"}
	err422   = &delivery.StatusError{Status: 422, Body: "bad order"}
)

// TestHealthTransitions feeds scripted outcomes and pins the log lines:
// one warn line per state change with the URL, the state and what was
// seen, never one per record.
func TestHealthTransitions(t *testing.T) {
	rep := func(n int, err error) []error {
		out := make([]error, n)
		for i := range out {
			out[i] = err
		}
		return out
	}
	cat := func(parts ...[]error) []error {
		var out []error
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	type line struct {
		state string
		attrs map[string]any // a subset of the line's attributes
	}
	for _, tc := range []struct {
		name     string
		outcomes []error
		want     []line
		final    delivery.HealthState
	}{
		{
			name:     "app down: one refusing line, not one per record",
			outcomes: rep(200, errRefus),
			want:     []line{{"refusing", map[string]any{"seen": "connection refused", "in_a_row": 3.0, "previous": "reachable"}}},
			final:    delivery.HealthRefusing,
		},
		{
			name:     "app down then up: refusing, then one recovered at the first answer",
			outcomes: cat(rep(50, errRefus), rep(100, nil)),
			want: []line{
				{"refusing", map[string]any{"seen": "connection refused"}},
				{"reachable", map[string]any{"previous": "refusing", "deliveries": 1.0, "failed": 0.0}},
			},
			final: delivery.HealthReachable,
		},
		{
			name:     "no such host and timeouts are no answer too",
			outcomes: cat(rep(2, errDNS), rep(1, errTime), rep(5, errDNS)),
			want:     []line{{"refusing", map[string]any{"seen": "timeout", "in_a_row": 3.0}}},
			final:    delivery.HealthRefusing,
		},
		{
			name:     "404 to everything: one mostly failing line naming 404, after the window fills",
			outcomes: rep(300, err404),
			want: []line{{"mostly failing", map[string]any{"dominant": "404", "dominant_count": 20.0, "deliveries": 20.0,
				"failed": 20.0, "example": "status 404: not found"}}},
			final: delivery.HealthFailing,
		},
		{
			name:     "19 failures are not enough to judge",
			outcomes: rep(19, err404),
			final:    delivery.HealthReachable,
		},
		{
			name: "poison: one record in ten refused for good is no dependency problem",
			outcomes: func() []error {
				var out []error
				for i := range 500 {
					if i%10 == 0 {
						out = append(out, err422)
					} else {
						out = append(out, nil)
					}
				}
				return out
			}(),
			final: delivery.HealthReachable,
		},
		{
			name: "failing about half the time does not flap",
			outcomes: func() []error {
				var out []error
				for i := range 400 {
					if i%2 == 0 {
						out = append(out, err503)
					} else {
						out = append(out, nil)
					}
				}
				return out
			}(),
			want:  []line{{"mostly failing", map[string]any{"dominant": "503"}}},
			final: delivery.HealthFailing,
		},
		{
			name:     "mostly failing recovers when fewer than a quarter of the window fail",
			outcomes: cat(rep(20, err404), rep(15, nil)),
			want:     []line{{"mostly failing", nil}},
			final:    delivery.HealthFailing, // 5 of 20 still failed
		},
		{
			name:     "mostly failing recovers at 4 failures of 20",
			outcomes: cat(rep(20, err404), rep(16, nil)),
			want:     []line{{"mostly failing", nil}, {"reachable", map[string]any{"previous": "mostly failing", "failed": 4.0}}},
			final:    delivery.HealthReachable,
		},
		{
			name:     "the dominant status is the most frequent failure",
			outcomes: cat(rep(6, err503), rep(14, err404)),
			want:     []line{{"mostly failing", map[string]any{"dominant": "404", "dominant_count": 14.0, "failed": 20.0}}},
			final:    delivery.HealthFailing,
		},
		{
			name:     "mostly failing, then down, then answering 503 to everything",
			outcomes: cat(rep(20, err404), rep(10, errRefus), rep(20, err503)), // 10: half the window without an answer
			want: []line{
				{"mostly failing", map[string]any{"dominant": "404"}},
				{"refusing", map[string]any{"previous": "mostly failing"}},
				{"reachable", map[string]any{"previous": "refusing", "seen": "503"}},
				{"mostly failing", map[string]any{"dominant": "503", "dominant_count": 20.0}},
			},
			final: delivery.HealthFailing,
		},
		{
			name:     "a burst of timeouts among answers is no outage",
			outcomes: cat(rep(20, nil), rep(5, errTime), rep(20, nil), rep(8, errTime), rep(20, nil)),
			final:    delivery.HealthReachable,
		},
		{
			name:     "a refusal between answers is no outage",
			outcomes: cat(rep(10, nil), rep(2, errRefus), rep(10, nil), rep(2, errRefus), rep(10, nil)),
			final:    delivery.HealthReachable,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, logs := newTestHealth(nil)
			for _, err := range tc.outcomes {
				h.Observe(1, err)
			}
			got := logs.lines(t)
			if len(got) != len(tc.want) {
				t.Fatalf("%d log lines, want %d: %v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				g := got[i]
				if g["level"] != "WARN" || g["state"] != w.state || g["url"] != "http://127.0.0.1:8080/kafka" {
					t.Errorf("line %d: %v, want level WARN, state %q, url http://127.0.0.1:8080/kafka", i, g, w.state)
				}
				for k, v := range w.attrs {
					if g[k] != v {
						t.Errorf("line %d: %s = %v (%T), want %v: %v", i, k, g[k], g[k], v, g)
					}
				}
			}
			if s := h.State(); s != tc.final {
				t.Errorf("final state %v, want %v", s, tc.final)
			}
		})
	}
}

// TestHealthRetriesLeftOut: retries failing (poison records cycling
// through the tiers while little else flows) do not make the app mostly
// failing; first deliveries do. A retry without an answer still counts
// toward refusing.
func TestHealthRetriesLeftOut(t *testing.T) {
	h, logs := newTestHealth(nil)
	for range 100 {
		h.Observe(2, err503)
	}
	for range 5 {
		h.Observe(1, nil)
	}
	if s := h.State(); s != delivery.HealthReachable || len(logs.lines(t)) != 0 {
		t.Errorf("after 100 failed retries: state %v, log %v; want reachable, no line", s, logs.lines(t))
	}
	for range 20 {
		h.Observe(3, errRefus)
	}
	if got := logs.lines(t); h.State() != delivery.HealthRefusing || len(got) != 1 || got[0]["state"] != "refusing" {
		t.Errorf("after 20 refused retries: state %v, log %v; want one refusing line", h.State(), got)
	}
}

// TestHealthRealErrors classifies what net/http really returns through
// delivery.HTTP: a closed port, an unknown host, an app answering 404, a
// timeout; and leaves out deliveries cancelled by the caller.
func TestHealthRealErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/kafka"
	ln.Close()
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	defer slow.Close()
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // no answer at all
		}
	}))
	defer hangUp.Close()

	for _, tc := range []struct {
		name    string
		url     string
		timeout time.Duration
		n       int
		state   delivery.HealthState
		attr    string
		want    string
	}{
		{"connection refused", closed, time.Second, 3, delivery.HealthRefusing, "seen", "connection refused"},
		{"no such host", "http://kretry-no-such-host.invalid/kafka", 2 * time.Second, 3, delivery.HealthRefusing, "seen", "no such host"},
		{"timeout", slow.URL, 50 * time.Millisecond, 3, delivery.HealthRefusing, "seen", "timeout"},
		{"closed before an answer", hangUp.URL, time.Second, 3, delivery.HealthRefusing, "seen", "connection closed"},
		{"404", notFound.URL, time.Second, 20, delivery.HealthFailing, "dominant", "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := delivery.NewHTTP(delivery.HTTPConfig{URL: tc.url, Timeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			h, logs := newTestHealth(d)
			if !delivery.BoundByContext(h) {
				t.Errorf("BoundByContext(Health over HTTP) = false, want true: the engine would watch each delivery with a goroutine")
			}
			for i := range tc.n {
				_ = h.Deliver(context.Background(), &delivery.Message{Topic: "orders", Offset: int64(i), Attempt: 1})
			}
			if s := h.State(); s != tc.state {
				t.Fatalf("state %v, want %v; log: %v", s, tc.state, logs.lines(t))
			}
			got := logs.lines(t)
			if len(got) != 1 || got[0][tc.attr] != tc.want {
				t.Errorf("log %v, want one line with %s=%q", got, tc.attr, tc.want)
			}
		})
	}

	t.Run("cancelled by the caller", func(t *testing.T) {
		d, err := delivery.NewHTTP(delivery.HTTPConfig{URL: slow.URL, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		h, logs := newTestHealth(d)
		for range 5 {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(10*time.Millisecond, cancel)
			if err := h.Deliver(ctx, &delivery.Message{Topic: "orders", Attempt: 1}); !errors.Is(err, context.Canceled) {
				t.Fatalf("Deliver = %v, want context.Canceled", err)
			}
		}
		if s := h.State(); s != delivery.HealthReachable || len(logs.lines(t)) != 0 {
			t.Errorf("after 5 cancelled deliveries: state %v, log %v; want reachable, no line (a shutdown is not an outage)", s, logs.lines(t))
		}
	})
}

// TestHealthConcurrent delivers from many goroutines (run with -race):
// one line for the outage, one for the recovery.
func TestHealthConcurrent(t *testing.T) {
	var up sync.WaitGroup
	var mu sync.Mutex
	down := true
	h, logs := newTestHealth(delivery.HandlerFunc(func(context.Context, *delivery.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return errRefus
		}
		return nil
	}))
	run := func() {
		for range 16 {
			up.Go(func() {
				for range 50 {
					_ = h.Deliver(context.Background(), &delivery.Message{Attempt: 1})
				}
			})
		}
		up.Wait()
	}
	run()
	mu.Lock()
	down = false
	mu.Unlock()
	run()
	got := logs.lines(t)
	if len(got) != 2 || got[0]["state"] != "refusing" || got[1]["state"] != "reachable" {
		t.Errorf("log %v, want a refusing line then a reachable one", got)
	}
	if delivery.BoundByContext(h) {
		t.Error("BoundByContext(Health over a HandlerFunc) = true, want false: a Go handler may ignore its context")
	}
}
