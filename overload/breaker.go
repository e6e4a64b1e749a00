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
	// Probes deliveries per round; a majority must succeed to close (2
	// of 3), and a majority failing reopens it for a longer wait.
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
	answer string        // systemic: the permanent answer that opened it
	since  time.Time     // when this outage's first opening happened
	until  time.Time     // open: when probing may start
	span   time.Duration // open: the length of the current wait
	rounds int           // failed probe rounds in this outage
	level  int           // rounds lost to fresh probes: the wait doubles per level
	out    int           // probes handed out this round
	ok     int           // probes that succeeded this round
	bad    int           // probes that failed this round
	strong bool          // one of them was a first attempt never held
	ramp   int           // after closing: the in-flight cap; 0 none

	// The windows of first attempts and of retries (tier records): the
	// retries count only while no first attempt succeeded in the last
	// Window deliveries (sinceFirstOK): records that failed before fail
	// more often, and must not open the breaker while fresh records
	// succeed; without fresh records, they alone show an outage.
	first, retry window
	sinceFirstOK int

	held   int64
	opened map[Reason]int64
}

func newBreaker(cfg BreakerConfig, most int, log *slog.Logger) *breaker {
	return &breaker{cfg: cfg, log: log, rand: rand.Float64, most: most, opened: map[Reason]int64{},
		first: newWindow(cfg), retry: newWindow(cfg)}
}

// window holds the last cfg.Window non-permanent outcomes of one kind,
// key "" for a success.
type window struct {
	cfg      BreakerConfig
	keys     []string
	failed   []bool
	head     int
	failures int
	counted  map[string]int // failure entries per key
	// full: count at least a whole window (after the breaker closed: the
	// records held or left behind by the outage come first, and must not
	// reopen it at once), else half of one.
	full bool
}

func newWindow(cfg BreakerConfig) window { return window{cfg: cfg, counted: map[string]int{}} }

// tripped reports whether the window's failures (one per key) are at
// least FailureRatio of its deliveries, counting at least Window/2 of
// them: with the defaults, 10 of the last 20, or 5 keys failing with no
// success between (a topic with few keys; one key failing alone never
// opens it).
func (w *window) tripped() bool {
	floor := (w.cfg.Window + 1) / 2
	if w.full {
		floor = w.cfg.Window
	}
	volume := max(len(w.keys), floor)
	return w.failures >= max(2, int(math.Ceil(w.cfg.FailureRatio*float64(volume))))
}

// add adds an OK or Transient outcome; a key's failure counts once.
func (w *window) add(o Outcome) {
	fail := o.Class == Transient
	if fail && w.counted[o.Key] > 0 {
		return // one key failing again and again is that key's problem
	}
	key := ""
	if fail {
		key = o.Key
	}
	if len(w.keys) < w.cfg.Window {
		w.keys, w.failed = append(w.keys, key), append(w.failed, fail)
	} else {
		if w.failed[w.head] {
			w.failures--
			if w.counted[w.keys[w.head]]--; w.counted[w.keys[w.head]] <= 0 {
				delete(w.counted, w.keys[w.head])
			}
		}
		w.keys[w.head], w.failed[w.head] = key, fail
		w.head = (w.head + 1) % w.cfg.Window
	}
	if fail {
		w.failures++
		w.counted[key]++
	}
}

func (w *window) reset(full bool) {
	w.keys, w.failed, w.head, w.failures, w.full = w.keys[:0], w.failed[:0], 0, 0, full
	clear(w.counted)
}

// observe adds a closed-state outcome of a first attempt (retry false) or
// a retry, and reports whether the breaker should open.
func (b *breaker) observe(o Outcome, retry bool) bool {
	if o.Class != OK && o.Class != Transient {
		return false
	}
	b.sinceFirstOK++
	if !retry {
		if o.Class == OK {
			b.sinceFirstOK = 0
		}
		b.first.add(o)
		return o.Class == Transient && b.first.tripped()
	}
	b.retry.add(o)
	return o.Class == Transient && b.sinceFirstOK >= b.cfg.Window && b.retry.tripped()
}

// resetWindow empties the windows when the breaker closes.
func (b *breaker) resetWindow() {
	b.first.reset(true)
	b.retry.reset(true)
	b.sinceFirstOK = 0
}

// admit reports whether a delivery may start; probe is true for a probe.
func (b *breaker) admit(now time.Time, inflight int) (ok, probe bool) {
	switch b.state {
	case Open:
		if now.Before(b.until) {
			return false, false
		}
		b.state, b.out, b.ok, b.bad, b.strong = Probing, 0, 0, 0, false
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

// resume is when the partitions resume before a probe round: a quarter
// of the wait (at most 1s) before it ends.
func (b *breaker) resume() time.Time {
	return b.until.Add(-min(time.Second, b.span/4))
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
	b.state, b.reason, b.since, b.rounds, b.level, b.ramp = Open, reason, now, 0, 0, 0
	b.answer = ""
	if reason == ReasonSystemic {
		b.answer = o.Answer
	}
	w := b.wait(0)
	b.until, b.span = now.Add(w), w
	b.opened[reason]++
	b.held++
	if reason == ReasonDependency {
		b.log.Warn("breaker open: most recent deliveries failed; delivery paused, no attempts consumed",
			"reason", reason, "failed", b.first.failures+b.retry.failures, "window", len(b.first.keys)+len(b.retry.keys),
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
	if !t.probe || t.round != b.rounds || b.state != Probing {
		if failed {
			b.held++
			return Hold
		}
		return Count
	}
	need := b.cfg.Probes/2 + 1
	if failed {
		// A record that failed before (a retry, or held) failing again
		// is weak evidence: a round lost only to such probes probes again
		// after the same wait instead of a longer one.
		b.strong = b.strong || !t.retry && !o.Again
		if b.bad++; b.bad <= b.cfg.Probes-need {
			return Probe // the round is not lost yet
		}
		if b.strong {
			b.level++
		}
		b.rounds++
		w := b.wait(b.level)
		b.state, b.until, b.span = Open, now.Add(w), w
		b.log.Warn("breaker open: a probe failed", "reason", b.reason, "seen", o.Answer, "example", o.Message,
			"wait", w.Round(time.Millisecond).String(), "rounds", b.rounds)
		return Probe
	}
	if b.ok++; b.ok >= need {
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
