package delivery

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// HealthState is what a Health tracker makes of the application from its
// recent deliveries. The values are those of the kretry.dependency.state
// gauge (docs/METRICS.md).
type HealthState int

const (
	// HealthReachable: the application answers, and most answers are 2xx
	// (or too few deliveries were seen to say otherwise).
	HealthReachable HealthState = 0
	// HealthFailing: the application answers, but at least
	// DefaultFailingRatio of the last DefaultHealthWindow first deliveries
	// (attempt 1) failed (an app answering 404 or 503 to everything).
	// Retries are left out: they are of records that failed already, and
	// a few poison records cycling through the tiers while little else
	// flows would otherwise look like a failing app.
	HealthFailing HealthState = 1
	// HealthRefusing: the last DefaultRefusingAfter deliveries got no
	// answer at all (connection refused, reset or closed before an answer,
	// no such host, network unreachable, timeout), and neither did at least DefaultFailingRatio
	// of the last DefaultHealthWindow: a burst of timeouts among answers
	// (slow records finishing together) is not an outage.
	HealthRefusing HealthState = 2
)

var healthNames = [...]string{"reachable", "mostly failing", "refusing"}

func (s HealthState) String() string {
	if s >= 0 && int(s) < len(healthNames) {
		return healthNames[s]
	}
	return "HealthState(" + strconv.Itoa(int(s)) + ")"
}

// Defaults of HealthConfig.
const (
	// DefaultHealthWindow is how many recent deliveries the failure ratio
	// is taken over; no verdict of HealthFailing before that many.
	DefaultHealthWindow = 20
	// DefaultRefusingAfter is how many deliveries in a row must get no
	// answer for HealthRefusing.
	DefaultRefusingAfter = 3
	// DefaultFailingRatio is the share of failed deliveries in the window
	// from which the application is HealthFailing.
	DefaultFailingRatio = 0.5
	// DefaultRecoveredRatio is the share of failed deliveries in the
	// window below which a failing application has recovered: lower than
	// DefaultFailingRatio, so that an app failing about half the time does
	// not flap between the two (one log line per change).
	DefaultRecoveredRatio = 0.25
	// maxExample bounds the example error text in a log line, in bytes.
	maxExample = 300
)

// HealthConfig configures NewHealth.
type HealthConfig struct {
	// Target names the application in the log lines: app.url.
	Target string
	// Logger gets one warn line per state change; nil uses slog.Default().
	Logger *slog.Logger
	// Window, RefusingAfter, FailingRatio and RecoveredRatio: 0 means the
	// Default… constant.
	Window         int
	RefusingAfter  int
	FailingRatio   float64
	RecoveredRatio float64
	// Now replaces time.Now, for tests.
	Now func() time.Time
}

// Health wraps a Deliverer and tracks whether the application behind it
// is reachable, refusing or mostly failing, from the outcomes of its recent
// deliveries (a sliding window; no probe of its own). Every change of state
// is logged once, at warn level, with the target, the state, the counts of
// the window and an example of what was seen; nothing is logged per record.
// The transitions:
//
//	reachable → refusing        the last RefusingAfter deliveries, and ≥ FailingRatio of the last Window, got no answer
//	reachable → mostly failing  ≥ FailingRatio of the last Window first deliveries (attempt 1) failed
//	mostly failing → refusing   as from reachable
//	refusing → reachable        a delivery got an answer ("recovered"; the window restarts)
//	mostly failing → reachable  < RecoveredRatio of the last Window first deliveries failed ("recovered")
//
// A delivery ended by the caller's context (a shutdown) is not counted.
// Health is safe for concurrent use; it changes nothing of what Deliver
// returns.
type Health struct {
	next Deliverer
	cfg  HealthConfig
	log  *slog.Logger

	mu      sync.Mutex
	state   HealthState
	since   time.Time // of the current state
	all     ring      // every delivery: the share without an answer
	first   ring      // first deliveries only: the share that failed
	noReply int       // deliveries in a row without an answer
}

// ring holds the latest outcomes, at most its capacity.
type ring struct {
	o    []outcome
	head int
}

func (r *ring) push(o outcome, size int) {
	if len(r.o) < size {
		r.o = append(r.o, o)
		return
	}
	r.o[r.head] = o
	r.head = (r.head + 1) % size
}

func (r *ring) reset() { r.o, r.head = r.o[:0], 0 }

// count returns how many outcomes match f.
func (r *ring) count(f func(outcome) bool) int {
	n := 0
	for _, o := range r.o {
		if f(o) {
			n++
		}
	}
	return n
}

// ordered returns the outcomes, oldest first.
func (r *ring) ordered() []outcome {
	return append(append([]outcome(nil), r.o[r.head:]...), r.o[:r.head]...)
}

// outcome is one delivery as Health counts it.
type outcome struct {
	failed  bool
	noReply bool
	kind    string // "404", "connection refused", "timeout", … ; "" when ok
	example string // the error text
}

// NewHealth returns next wrapped in a Health tracker.
func NewHealth(next Deliverer, cfg HealthConfig) *Health {
	if cfg.Window <= 0 {
		cfg.Window = DefaultHealthWindow
	}
	if cfg.RefusingAfter <= 0 {
		cfg.RefusingAfter = DefaultRefusingAfter
	}
	if cfg.FailingRatio <= 0 {
		cfg.FailingRatio = DefaultFailingRatio
	}
	if cfg.RecoveredRatio <= 0 {
		cfg.RecoveredRatio = DefaultRecoveredRatio
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Health{next: next, cfg: cfg, log: log, since: cfg.Now()}
}

var _ Deliverer = (*Health)(nil)

// Deliver delivers m through the wrapped Deliverer and counts the outcome.
func (h *Health) Deliver(ctx context.Context, m *Message) error {
	err := h.next.Deliver(ctx, m)
	if err != nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err // cancelled by the caller: says nothing about the app
	}
	h.Observe(m.Attempt, err)
	return err
}

// BoundByContext reports whether the wrapped Deliverer ends every delivery
// when its context ends (see BoundByContext).
func (h *Health) BoundByContext() bool { return BoundByContext(h.next) }

// State returns the current state.
func (h *Health) State() HealthState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// Observe counts the outcome of one delivery of the given attempt (err
// nil for success); Deliver calls it.
func (h *Health) Observe(attempt int, err error) {
	o := classifyOutcome(err)
	h.mu.Lock()
	defer h.mu.Unlock()
	if o.noReply {
		h.noReply++
	} else {
		h.noReply = 0
	}
	if h.state == HealthRefusing && !o.noReply {
		// The app answers again: the refusals were the outage, already
		// reported; judge what comes now on its own.
		h.all.reset()
		h.first.reset()
	}
	h.all.push(o, h.cfg.Window)
	if attempt <= 1 {
		h.first.push(o, h.cfg.Window)
	}
	if h.state == HealthRefusing && !o.noReply {
		h.change(HealthReachable, o)
		return
	}
	noReply := h.all.count(func(o outcome) bool { return o.noReply })
	failed := h.first.count(func(o outcome) bool { return o.failed })
	switch {
	case h.noReply >= h.cfg.RefusingAfter && float64(noReply) >= h.cfg.FailingRatio*float64(len(h.all.o)):
		h.change(HealthRefusing, o)
	case h.state == HealthReachable && len(h.first.o) >= h.cfg.Window &&
		float64(failed) >= h.cfg.FailingRatio*float64(len(h.first.o)):
		h.change(HealthFailing, o)
	case h.state == HealthFailing && float64(failed) < h.cfg.RecoveredRatio*float64(len(h.first.o)):
		h.change(HealthReachable, o)
	}
}

// change moves to state s and logs the line; a no-op when s is the
// current state. latest is the outcome that caused it.
func (h *Health) change(s HealthState, latest outcome) {
	if s == h.state {
		return
	}
	now := h.cfg.Now()
	prev, lasted := h.state, now.Sub(h.since)
	h.state, h.since = s, now

	// The dominant failure kind of the window, with its latest example.
	win := &h.all
	if s == HealthFailing {
		win = &h.first
	}
	counts := map[string]int{}
	examples := map[string]string{}
	dominant := ""
	for _, o := range win.ordered() { // oldest first: the latest example wins
		if !o.failed {
			continue
		}
		counts[o.kind]++
		examples[o.kind] = o.example
	}
	for k, n := range counts {
		if n > counts[dominant] || n == counts[dominant] && k < dominant {
			dominant = k
		}
	}
	attrs := []any{"url", h.cfg.Target, "state", s.String(), "previous", prev.String(),
		"deliveries", len(win.o), "failed", win.count(func(o outcome) bool { return o.failed })}
	var msg string
	switch s {
	case HealthRefusing:
		msg = "app dependency refusing: the latest deliveries got no answer (refused, or none within app.timeout)"
		attrs = append(attrs, "in_a_row", h.noReply, "seen", latest.kind, "example", latest.example)
	case HealthFailing:
		msg = "app dependency mostly failing: most recent deliveries failed (a failure answer, or none in time)"
		attrs = append(attrs, "dominant", dominant, "dominant_count", counts[dominant], "example", examples[dominant])
	default:
		msg = "app dependency recovered"
		attrs = append(attrs, "after", lasted.Round(time.Millisecond).String())
		if latest.kind != "" {
			attrs = append(attrs, "seen", latest.kind)
		}
	}
	h.log.Warn(msg, attrs...)
}

// classifyOutcome sorts a delivery's error: no answer at all (the
// application is down, unknown or too slow), an answer that is a failure
// (a status, or a handler error), or success.
func classifyOutcome(err error) outcome {
	if err == nil {
		return outcome{}
	}
	o := outcome{failed: true, kind: "error", example: err.Error()}
	if len(o.example) > maxExample {
		o.example = o.example[:maxExample] + "…"
	}
	var se *StatusError
	var dns *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &se):
		o.kind = strconv.Itoa(se.Status)
	case errors.Is(err, syscall.ECONNREFUSED):
		o.kind, o.noReply = "connection refused", true
	case errors.As(err, &dns):
		o.kind, o.noReply = "no such host", true
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		o.kind, o.noReply = "timeout", true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		o.kind, o.noReply = "connection reset", true
	case errors.Is(err, ErrClosedBeforeAnswer):
		o.kind, o.noReply = "connection closed", true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		o.kind, o.noReply = "unreachable", true
	}
	return o
}

// BoundByContext reports whether d is known to end every delivery when
// its context ends (HTTP does: net/http aborts the request), so that a
// caller need not watch it with a goroutine of its own. Wrappers report
// what they wrap by a method BoundByContext() bool.
func BoundByContext(d Deliverer) bool {
	switch d := d.(type) {
	case *HTTP:
		return true
	case interface{ BoundByContext() bool }:
		return d.BoundByContext()
	}
	return false
}
