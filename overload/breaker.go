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
	// failure counted once, and a failure left out when at least Window
	// deliveries ran during it and fewer than FailureRatio of them failed
	// (see Clumping in window.go).
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
	outage int           // counts openings: a Ticket's outage (see poison.go)
	answer string        // systemic: the permanent answer that opened it
	since  time.Time     // when this outage's first opening happened
	until  time.Time     // open: when probing may start
	span   time.Duration // open: the length of the current wait
	rounds int           // failed probe rounds in this outage
	out    int           // probes handed out this round
	ok     int           // probes that succeeded this round
	bad    int           // probes that failed this round
	ramp   int           // after closing: the in-flight cap; 0 none

	// A systemic outage's probe round (poison.go): its answers so far
	// and what they showed; freshBadSince, a fresh failure while open
	// between two rounds, which the next round carries.
	answered                                  int
	freshOK, freshBad, heldBad, freshBadSince bool
	freshID                                   string // the fresh record that succeeded

	// The windows of first attempts and of retries (tier records): the
	// retries count only while no first attempt succeeded in the last
	// Window deliveries (sinceFirstOK) nor for Wait (firstOK): records
	// that failed before fail more often, and must not open the breaker
	// while fresh records succeed; without fresh records, they alone show
	// an outage. The time matters because due retries are delivered
	// before first attempts: a tier's burst of Window retries in a row
	// says nothing of the first attempts between the bursts (kretry demo
	// opened the breaker 9 to 12 times a run so, its app healthy).
	// Released parked records are judged over their own window (released:
	// their successes and failures), without the Wait: they are delivered
	// among the first attempts, not in a tier's bursts, and a second of
	// them failing in an outage is thousands of attempts consumed
	// (TestOutageDuringAParkingRelease).
	first, retry, released window
	sinceFirstOK           int
	firstOK                time.Time

	// Hysteresis (see relapse): reopenings since this episode's first
	// opening, and, while recovering after a close, the deliveries
	// counted since then.
	relapses   int
	recovering bool
	trial      int

	// weak: this outage opened on retries alone and no fresh first
	// attempt failed since, as a probe or not (see closeQuiet); quiet: closed by
	// closeQuiet, and no first attempt delivered since, so retries alone
	// do not open the breaker.
	weak, quiet bool

	// proven: a delivery succeeded since the gate was built (see
	// Outcome.Last).
	proven bool
	// freshSinceClose: a fresh first attempt succeeded with the breaker
	// closed since it last closed on probes; lastReopened: it opened again
	// on a last-tier failure since the last such success (see again.go).
	freshSinceClose, lastReopened bool

	held   int64
	opened map[Reason]int64
}

// weakRounds is how many probe rounds a weak outage loses before the
// breaker closes (see closeQuiet).
const weakRounds = 3

func newBreaker(cfg BreakerConfig, most int, log *slog.Logger) *breaker {
	return &breaker{cfg: cfg, log: log, rand: rand.Float64, most: most, opened: map[Reason]int64{},
		first: newWindow(cfg), retry: newWindow(cfg), released: newWindow(cfg)}
}

// maxRelapses bounds the evidence a reopening needs: Window·2⁴ deliveries.
const maxRelapses = 4

// observe adds a closed-state outcome of a first attempt (retry false) or
// of weak evidence (retry true: a retry, or a released parked record's
// failure; see Outcome.Released and the released window), during being
// what ended while it was delivered, and reports whether the breaker
// should open.
func (b *breaker) observe(now time.Time, o Outcome, retry bool, during tally) bool {
	if o.Class != OK && o.Class != Transient || o.Class == Transient && b.overtaken(during) {
		return false
	}
	b.recovered()
	b.sinceFirstOK++
	if o.Released {
		b.released.add(o)
	}
	if !retry {
		b.quiet = false
		if o.Class == OK {
			b.sinceFirstOK, b.firstOK = 0, now
		}
		b.first.add(o)
		return o.Class == Transient && b.first.tripped()
	}
	if o.Released {
		return !b.quiet && o.Class == Transient && b.sinceFirstOK >= b.cfg.Window && b.released.tripped()
	}
	b.retry.add(o)
	return !b.quiet && o.Class == Transient && b.sinceFirstOK >= b.cfg.Window &&
		now.Sub(b.firstOK) >= b.cfg.Wait && b.retry.tripped()
}

// Hysteresis. A breaker that closes because its probes succeeded and
// opens again at once is seeing records that fail together while the
// dependency is fine (a synchronised failure of many keys: the block of
// records behind the probes), or a dependency that flaps. Either way the
// window that opened it was too small a sample, so each reopening in one
// episode doubles the evidence the next one needs: after the n-th
// reopening, the breaker opens again only when FailureRatio of the last
// Window·2ⁿ deliveries failed, counting a whole such window (n at most
// maxRelapses). The episode ends, and the window is Window again, once
// the breaker stayed closed through one whole window of the size it
// needed. The wait before probing does not grow with reopenings: the
// probes succeeded, the dependency answered.

// size is the evidence window after a close: Window·2^relapses.
func (b *breaker) size() int { return b.cfg.Window << b.relapses }

// resetWindow empties the windows when the breaker closes; they must see
// a whole window of the episode's size before it can open again.
func (b *breaker) resetWindow() {
	b.first.reset(b.size(), true)
	b.retry.reset(b.size(), true)
	b.released.reset(b.size(), true)
	b.sinceFirstOK = 0
	b.recovering, b.trial = true, 0
}

// recovered counts a closed-state delivery and ends the episode when the
// breaker stayed closed through a whole window since closing.
func (b *breaker) recovered() {
	if !b.recovering {
		return
	}
	if b.trial++; b.trial < b.size() {
		return
	}
	b.recovering, b.relapses = false, 0
	b.first.shrink(b.cfg.Window)
	b.retry.shrink(b.cfg.Window)
	b.released.shrink(b.cfg.Window)
}

// admit reports whether a delivery may start; probe is true for a probe.
func (b *breaker) admit(now time.Time, inflight int) (ok, probe bool) {
	switch b.state {
	case Open:
		if now.Before(b.until) {
			return false, false
		}
		b.state, b.out, b.ok, b.bad = Probing, 0, 0, 0
		b.newRound()
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
	if t.probe && t.outage == b.outage && t.round == b.rounds && b.state == Probing {
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
// It saturates: Wait<<n and the jitter would wrap past the largest
// duration for long waits, and a negative wait probes at once.
func (b *breaker) wait(n int) time.Duration {
	d := b.cfg.MaxWait
	if n < 63 && b.cfg.Wait <= math.MaxInt64>>n {
		d = min(b.cfg.MaxWait, b.cfg.Wait<<n)
	}
	j := 0.2 * b.rand() * float64(d)
	if j >= float64(math.MaxInt64-d) {
		return math.MaxInt64
	}
	return d + time.Duration(j)
}

// open opens the breaker (from closed) for reason, after outcome o.
func (b *breaker) open(now time.Time, reason Reason, o Outcome) {
	b.state, b.reason, b.since, b.rounds, b.ramp, b.weak = Open, reason, now, 0, 0, false
	b.outage++
	b.freshBadSince = false
	if b.recovering {
		b.relapses = min(maxRelapses, b.relapses+1) // see size
	} else {
		b.relapses = 0
	}
	b.recovering = false
	b.answer = ""
	if reason == ReasonSystemic {
		b.answer = o.Answer
	}
	w := b.wait(0)
	b.until, b.span = now.Add(w), w
	b.opened[reason]++
	b.held++
}

// logOpen logs the opening for the dependency on o.
func (b *breaker) logOpen(o Outcome) {
	b.log.Warn("breaker open: most recent deliveries failed; delivery paused, no attempts consumed",
		"reason", b.reason, "failed", b.first.failures+b.retry.failures+b.released.failures,
		"deliveries", len(b.first.keys)+len(b.retry.keys)+b.released.failures, // its successes are in first
		"seen", o.Answer, "example", o.Message, "wait", b.span.Round(time.Millisecond).String(), "reopenings", b.relapses)
}

// fails reports whether o counts as the outage going on.
//
// In the guard's outage every permanent answer fails, not only the one
// that tripped it: a probe that the app rejects otherwise (a 422 in a 404
// outage) is no sign that it accepts records again. Counted as a success,
// two fresh 422s closed a 404 outage, the held 404s followed to the DLQ,
// and again at every pair: 45 of them with nothing acknowledged (a breaker
// helper's rig).
func (b *breaker) fails(o Outcome) bool {
	if b.reason == ReasonSystemic {
		return o.Class == Transient || o.Class == Permanent
	}
	return o.Class == Transient
}

// done takes the outcome of a delivery made while open or probing.
func (b *breaker) done(now time.Time, t Ticket, o Outcome) Verdict {
	failed := b.fails(o)
	fresh := !t.retry && !o.Released && !o.Again && !o.seenBefore()
	if failed && fresh {
		// A fresh record fails too: an outage. Also when it is not this
		// round's probe: one admitted before the opening, or a probe
		// answering after faster ones lost its round (a timeout).
		b.weak = false
		b.noteFreshFailure()
	}
	if v, closed := b.poison(now, t, o, failed, fresh); closed {
		return v
	}
	if !t.probe || t.outage != b.outage || t.round != b.rounds || b.state != Probing {
		if failed {
			b.held++
			return Hold
		}
		return Count
	}
	need := b.cfg.Probes/2 + 1
	if failed {
		if b.bad++; b.bad <= b.cfg.Probes-need {
			return Probe // the round is not lost yet
		}
		b.rounds++
		if b.weak && b.rounds >= weakRounds {
			b.closeQuiet(now, o)
			return Spend
		}
		// Every lost round doubles the wait, also one lost only to
		// records that failed before (held records, retries: weak
		// evidence, the only records there are when the source is quiet);
		// at the same wait they would be probed every second forever.
		w := b.wait(b.rounds)
		b.state, b.until, b.span = Open, now.Add(w), w
		b.log.Warn("breaker open: a probe failed", "reason", b.reason, "seen", o.Answer, "example", o.Message,
			"wait", w.Round(time.Millisecond).String(), "rounds", b.rounds, "retries_only", b.weak)
		return Probe
	}
	if b.ok++; b.ok >= need {
		b.log.Info("breaker closed: probes succeeded; delivery resumes gradually", "reason", b.reason,
			"open_for", now.Sub(b.since).Round(time.Millisecond).String(), "held", b.held, "next_window", b.size())
		b.closeProbed()
	}
	return Count
}

// closeProbed closes the breaker after its probes showed the app answers:
// delivery resumes gradually (slow start).
func (b *breaker) closeProbed() {
	b.state, b.ramp = Closed, b.cfg.Probes
	b.freshSinceClose = false
	b.resetWindow()
}

// closeQuiet closes a weak outage once it lost weakRounds probe rounds.
// The source is quiet: only records that failed before are delivered,
// and nothing tells an outage from records failing on their own (a poison
// answering 503 forever on several keys). Held, such records would stay
// forever, /readyz at 503, never in the DLQ (a newcomer's `kretry demo`:
// 8 keys held for 13 minutes). So the breaker stops holding them: they
// walk their tiers and reach the DLQ as any failing record does, and
// retries alone cannot open it again until a first attempt is delivered
// (quiet); a fresh record failing then opens it as an outage.
func (b *breaker) closeQuiet(now time.Time, o Outcome) {
	b.log.Warn("breaker closed: only records that failed before are failing and no fresh record arrived to tell an outage; they walk their tiers as usual and may reach the DLQ; a fresh record failing opens the breaker again",
		"reason", b.reason, "open_for", now.Sub(b.since).Round(time.Millisecond).String(), "rounds", b.rounds, "held", b.held, "seen", o.Answer, "example", o.Message)
	b.state, b.quiet = Closed, true
	b.resetWindow()
}

// grow widens the slow start after a success.
func (b *breaker) grow() {
	if b.ramp > 0 {
		if b.ramp++; b.ramp >= b.most {
			b.ramp = 0
		}
	}
}
