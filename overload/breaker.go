package overload

import (
	"log/slog"
	"math"
	"math/rand/v2"
	"time"
)

// State is the breaker's state (the kretry.breaker.state gauge).
type State int

const (
	// Closed: deliveries flow.
	Closed State = 0
	// Open: nothing is delivered; the source and tier partitions pause.
	Open State = 1
	// Probing: a few deliveries test the dependency.
	Probing State = 2
)

var stateNames = [...]string{"closed", "open", "probing"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "State(?)"
}

// Reason is why the breaker opened (the kretry.reason attribute).
type Reason string

const (
	// ReasonDependency: most recent deliveries failed transiently.
	ReasonDependency Reason = "dependency"
	// ReasonSystemic: the guard saw the same permanent answer for many
	// records of many keys.
	ReasonSystemic Reason = "systemic"
)

// BreakerConfig configures the dependency breaker (config.Breaker).
type BreakerConfig struct {
	// Enabled turns the breaker on; the guard needs it too (it opens it).
	Enabled bool
	// Window, FailureRatio: the breaker opens when at least FailureRatio
	// of the last Window deliveries (permanent failures left out, at
	// least Window/2 of them counted) failed transiently, each key's
	// failure counted once.
	Window       int
	FailureRatio float64
	// Wait before the first probe round, doubled per failed round up to
	// MaxWait, each stretched by a random 0..20%.
	Wait, MaxWait time.Duration
	// Probes deliveries per round; all must succeed to close.
	Probes int
}

// breaker is the state machine; the Gate holds its lock.
type breaker struct {
	cfg  BreakerConfig
	log  *slog.Logger
	rand func() float64
	// most bounds the slow start after closing (the in-flight ceiling).
	most int

	state  State
	reason Reason
	answer string    // systemic: the permanent answer that opened it
	since  time.Time // when this outage's first opening happened
	until  time.Time // open: when probing may start
	rounds int       // failed probe rounds in this outage
	out    int       // probes handed out this round
	ok     int       // probes that succeeded this round
	ramp   int       // after closing: the in-flight cap; 0 none

	// The window: the last cfg.Window non-permanent outcomes, key "" for
	// a success.
	keys     []string
	failed   []bool
	head     int
	failures int
	counted  map[string]int // failure entries per key in the window

	held   int64
	opened map[Reason]int64
}

func newBreaker(cfg BreakerConfig, most int, log *slog.Logger) *breaker {
	return &breaker{cfg: cfg, log: log, rand: rand.Float64, most: most, counted: map[string]int{}, opened: map[Reason]int64{}}
}

// tripped reports whether the window's failures (one per key) are at
// least FailureRatio of its deliveries, counting at least Window/2 of
// them: with the defaults, 10 of the last 20, or 5 keys failing with no
// success between (a topic with few keys; one key failing alone never
// opens it).
func (b *breaker) tripped() bool {
	volume := max(len(b.keys), (b.cfg.Window+1)/2)
	return b.failures >= max(2, int(math.Ceil(b.cfg.FailureRatio*float64(volume))))
}

// observe adds a closed-state outcome to the window.
func (b *breaker) observe(o Outcome) {
	switch o.Class {
	case Permanent:
		return
	case Transient:
		if b.counted[o.Key] > 0 {
			return // one key failing again and again is that key's problem
		}
	}
	fail := o.Class == Transient
	key := ""
	if fail {
		key = o.Key
	}
	if len(b.keys) < b.cfg.Window {
		b.keys, b.failed = append(b.keys, key), append(b.failed, fail)
	} else {
		if b.failed[b.head] {
			b.failures--
			if b.counted[b.keys[b.head]]--; b.counted[b.keys[b.head]] <= 0 {
				delete(b.counted, b.keys[b.head])
			}
		}
		b.keys[b.head], b.failed[b.head] = key, fail
		b.head = (b.head + 1) % b.cfg.Window
	}
	if fail {
		b.failures++
		b.counted[key]++
	}
}

func (b *breaker) resetWindow() {
	b.keys, b.failed, b.head, b.failures = b.keys[:0], b.failed[:0], 0, 0
	clear(b.counted)
}

// admit reports whether a delivery may start; probe is true for a probe.
func (b *breaker) admit(now time.Time, inflight int) (ok, probe bool) {
	switch b.state {
	case Open:
		if now.Before(b.until) {
			return false, false
		}
		b.state, b.out, b.ok = Probing, 0, 0
		b.log.Info("breaker probing", "reason", b.reason, "probes", b.cfg.Probes, "round", b.rounds+1)
		fallthrough
	case Probing:
		if b.out >= b.cfg.Probes {
			return false, false
		}
		b.out++
		return true, true
	}
	if b.ramp > 0 && inflight >= b.ramp {
		return false, false
	}
	return true, false
}

// unadmit gives back a probe that a later policy refused.
func (b *breaker) unadmit(t Ticket) {
	if t.probe && t.round == b.rounds && b.state == Probing {
		b.out--
	}
}

// wait is the wait before probe round n (0-based): Wait·2ⁿ up to MaxWait,
// stretched by 0..20%.
func (b *breaker) wait(n int) time.Duration {
	d := b.cfg.MaxWait
	if n < 30 {
		d = min(b.cfg.MaxWait, b.cfg.Wait<<n)
	}
	return d + time.Duration(0.2*b.rand()*float64(d))
}

// open opens the breaker (from closed) for reason, after outcome o.
func (b *breaker) open(now time.Time, reason Reason, o Outcome) {
	b.state, b.reason, b.since, b.rounds, b.ramp = Open, reason, now, 0, 0
	b.answer = ""
	if reason == ReasonSystemic {
		b.answer = o.Answer
	}
	w := b.wait(0)
	b.until = now.Add(w)
	b.opened[reason]++
	b.held++
	if reason == ReasonDependency {
		b.log.Warn("breaker open: most recent deliveries failed; delivery paused, no attempts consumed",
			"reason", reason, "failed", b.failures, "window", len(b.keys), "keys", len(b.counted),
			"seen", o.Answer, "example", o.Message, "wait", w.Round(time.Millisecond).String())
	}
}

// fails reports whether o counts as the outage going on.
func (b *breaker) fails(o Outcome) bool {
	if b.reason == ReasonSystemic {
		return o.Class == Transient || o.Class == Permanent && o.Answer == b.answer
	}
	return o.Class == Transient
}

// done takes the outcome of a delivery made while open or probing.
func (b *breaker) done(now time.Time, t Ticket, o Outcome) Verdict {
	failed := b.fails(o)
	if failed {
		b.held++
	}
	if !t.probe || t.round != b.rounds || b.state != Probing {
		if failed {
			return Hold
		}
		return Count
	}
	if failed {
		b.rounds++
		w := b.wait(b.rounds)
		b.state, b.until = Open, now.Add(w)
		b.log.Warn("breaker open: a probe failed", "reason", b.reason, "seen", o.Answer, "example", o.Message,
			"wait", w.Round(time.Millisecond).String(), "rounds", b.rounds)
		return Hold
	}
	if b.ok++; b.ok >= b.cfg.Probes {
		b.log.Info("breaker closed: probes succeeded; delivery resumes gradually", "reason", b.reason,
			"open_for", now.Sub(b.since).Round(time.Millisecond).String(), "held", b.held)
		b.state, b.ramp = Closed, b.cfg.Probes
		b.resetWindow()
	}
	return Count
}

// grow widens the slow start after a success.
func (b *breaker) grow() {
	if b.ramp > 0 {
		if b.ramp++; b.ramp >= b.most {
			b.ramp = 0
		}
	}
}
