package overload

import (
	"log/slog"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"golang.org/x/time/rate"
)

// Class is a delivery's outcome as the policies see it.
type Class int

const (
	// OK: the app acknowledged the record.
	OK Class = iota
	// Transient: a failure routed to the next tier.
	Transient
	// Permanent: a failure routed to the DLQ.
	Permanent
	// Cancelled: cut short by a shutdown; says nothing of the app.
	Cancelled
)

// Outcome is one finished delivery.
type Outcome struct {
	Class Class
	// Key identifies the record's key: failures count once per key. For
	// a record with a null key, its ce-id.
	Key string
	// ID is the record's ce-id, for the guard's log line.
	ID string
	// Answer is a low-cardinality kind of failure: the HTTP status as
	// text ("503"), "timeout", "connection" or "other"; "" for OK.
	Answer string
	// Message is the error text (a log line's example).
	Message string
	// Last: a transient failure that dead-letters the record (exhausted:
	// it was on its last tier). Before the gate saw its first success
	// such a failure opens the breaker at once (see Gate.Done).
	Last bool
	// Again: the record was held before (its earlier failure did not
	// count). Its failure says little of the dependency now — the same
	// record failing again — so it does not count towards opening the
	// breaker; its success counts. Its permanent failure counts for the
	// guard once the breaker is closed (see heldRejection).
	Again bool
	// Redriven: a record `kretry dlq redrive` brought back. Answered with
	// a permanent error it counts for nothing (see seenBefore): it was in
	// the DLQ already and goes back.
	Redriven bool
	// Released: a parked record released after its key's earlier record
	// finished. Its key failed before, so its failure, like a retry's, is
	// weak evidence of the dependency: it counts in a window of released
	// records, not the first attempts' (see breaker.observe). Without this, the
	// parked records of keys whose every first attempt fails, once the
	// other keys' records are all delivered, read as an outage and were
	// held for ever (e2e TestFaultSuite, KRETRY_TEST_FAULT=overload). Its
	// success counts as a first attempt's (the retry window alone opens
	// the breaker only when no first attempt succeeded for Wait: kretry
	// demo's tail of released records succeeding and retries failing
	// opened it four times a run otherwise). It is a first attempt for
	// the retry budget all the same.
	Released bool
}

// seenBefore reports whether o's failure is of a record that failed the
// same way before: one held before (Again), or a redriven record the app
// rejects again. Without the second, a redrive of records the app still
// rejects, on a quiet topic, read as a systemic failure and stopped the
// topic's delivery for the breaker's wait.
func (o Outcome) seenBefore() bool {
	return o.Class != OK && (o.Again || o.Redriven && o.Class == Permanent)
}

// Verdict is what the engine does with a finished delivery.
type Verdict int

const (
	// Count: the attempt counts; route the record as usual.
	Count Verdict = iota
	// Hold: the attempt does not count; the record waits at the head of
	// its key and is delivered again later, with the same attempt number.
	Hold
	// Probe: a failed probe. Its attempt counts when it moves the record
	// on to a tier, and does not (Hold) when it would dead-letter it: a
	// probe never dead-letters a record, so an outage of any length
	// dead-letters nothing, while a record that fails for reasons of its
	// own still walks the tiers (held forever, it could keep the breaker
	// from ever seeing a success).
	Probe
	// Spend: a failed probe whose attempt counts even when it dead-letters
	// the record: the one that closes an outage that opened on retries
	// alone (a quiet source: no fresh record to tell an outage from
	// records failing for reasons of their own) after weakRounds lost
	// probe rounds with no first attempt failing. The breaker then stops
	// holding (see closeQuiet): records that fail on their own reach the
	// DLQ as exhausted instead of being held forever.
	Spend
)

// Config configures a Gate. The zero value admits everything.
type Config struct {
	Breaker BreakerConfig
	Guard   GuardConfig
	Budget  BudgetConfig
	// MaxInFlight is the engine's bound on concurrent deliveries: the
	// adaptive limit's ceiling and the end of the breaker's slow start.
	MaxInFlight int
	// Adaptive: app.max_in_flight auto — an adaptive limit between 1 and
	// MaxInFlight, starting at InitialInFlight.
	Adaptive        bool
	InitialInFlight int
	// MaxRate in records/s (all deliveries); 0 is no limit.
	MaxRate float64
	// Logger gets one line per change of state; nil uses slog.Default().
	Logger *slog.Logger
}

// Ticket is an admitted delivery; hand it back to Done.
type Ticket struct {
	probe  bool
	retry  bool
	outage int // the breaker's outage when admitted (see breaker.outage)
	round  int
	permit adaptivelimiter.Permit
	// start: the gate's tally when the delivery began (timed: set by
	// Admit), so Done knows what ended during it (see overtaken).
	start tally
	timed bool
}

// Gate is the overload policy of one source topic. See the package doc.
type Gate struct {
	mu      sync.Mutex
	cfg     Config
	breaker *breaker
	guard   *guard
	budget  *budget
	rate    *rate.Limiter
	limiter adaptivelimiter.AdaptiveLimiter[any]

	wake         time.Time // when a refused Admit may be granted
	overBudget   time.Time // tier partitions stay paused until then
	budgetDenied int64
	ended        tally // OK and transient outcomes so far
	running      int   // admitted deliveries not yet done
	expired      map[string]int64
	prints       map[Fingerprint]int64 // see fingerprint.go
}

// New builds a Gate.
func New(cfg Config) *Gate {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	cfg.MaxInFlight = max(1, cfg.MaxInFlight)
	g := &Gate{cfg: cfg, breaker: newBreaker(cfg.Breaker, cfg.MaxInFlight, log), guard: newGuard(cfg.Guard, log), budget: newBudget(cfg.Budget), expired: map[string]int64{},
		prints: map[Fingerprint]int64{}}
	if cfg.MaxRate > 0 {
		g.rate = rate.NewLimiter(rate.Limit(cfg.MaxRate), max(1, int(cfg.MaxRate)))
	}
	if cfg.Adaptive {
		initial := min(max(1, cfg.InitialInFlight), cfg.MaxInFlight)
		g.limiter = adaptivelimiter.NewBuilder[any]().WithLimits(1, uint(cfg.MaxInFlight), uint(initial)).Build()
	}
	return g
}

// Admit reports whether a delivery may start at now, with inflight
// deliveries under way; retry is true for a tier record. When it may not,
// Wake says when to ask again (a delivery ending may also change the
// answer).
func (g *Gate) Admit(now time.Time, retry bool, inflight int) (Ticket, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var t Ticket
	if g.cfg.Breaker.Enabled || g.cfg.Guard.Enabled {
		ok, probe := g.breaker.admit(now, inflight)
		if !ok {
			g.wake = g.breaker.until
			return t, false
		}
		t.probe, t.outage, t.round = probe, g.breaker.outage, g.breaker.rounds
	}
	t.retry = retry
	if g.limiter != nil {
		p, ok := g.limiter.TryAcquirePermit()
		if !ok {
			g.breaker.unadmit(t)
			return Ticket{}, false // a delivery ending frees it
		}
		t.permit = p
	}
	var res *rate.Reservation
	if g.rate != nil {
		res = g.rate.ReserveN(now, 1)
		if d := res.DelayFrom(now); d > 0 {
			res.CancelAt(now)
			g.refuse(t, now.Add(d))
			return Ticket{}, false
		}
	}
	if g.budget != nil {
		if retry && !g.budget.allows(now) {
			if res != nil {
				res.CancelAt(now)
			}
			g.budgetDenied++
			g.overBudget = g.budget.next(now)
			g.refuse(t, g.overBudget)
			return Ticket{}, false
		}
		g.budget.record(now, retry)
	}
	t.start, t.timed = g.ended, true
	g.running++
	return t, true
}

func (g *Gate) refuse(t Ticket, wake time.Time) {
	g.breaker.unadmit(t)
	if t.permit != nil {
		t.permit.Drop()
	}
	g.wake = wake
}

// Done takes the outcome of the delivery admitted with t and says whether
// its attempt counts.
func (g *Gate) Done(now time.Time, t Ticket, o Outcome) Verdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.permit != nil {
		if o.Class == Cancelled {
			t.permit.Drop()
		} else {
			t.permit.Record()
		}
	}
	if t.timed {
		g.running = max(0, g.running-1)
	}
	if o.Class == Cancelled {
		g.breaker.unadmit(t)
		return Count
	}
	g.countFingerprint(o)
	during := g.ended.since(t, g.running)
	g.ended.add(o)
	b := g.breaker
	if o.Class == OK {
		b.proven = true
	}
	b.noteFresh(t, o)
	if !g.cfg.Breaker.Enabled && !g.cfg.Guard.Enabled {
		return Count
	}
	if b.state != Closed {
		if g.guardsOutage(now, o) {
			return Hold
		}
		systemic := b.reason == ReasonSystemic
		v := b.done(now, t, o)
		if b.state == Closed && systemic {
			g.guard.reset() // the answers before the outage are of no use now
		}
		return v
	}
	return g.closedVerdict(now, t, o, during)
}

// closedVerdict is Done's verdict on o with the breaker closed: Hold when
// o opens it, for the guard (systemic) or for the dependency, else Count.
// during is what ended while t's delivery ran. g.mu is held.
func (g *Gate) closedVerdict(now time.Time, t Ticket, o Outcome, during tally) Verdict {
	b := g.breaker
	if b.downAgain(o) {
		return g.reopenOnLast(now, o)
	}
	if o.seenBefore() && !o.heldRejection() {
		return Count
	}
	if g.cfg.Guard.Enabled && g.guard.observe(now, o) {
		b.open(now, ReasonSystemic, o)
		g.guard.report(o, b)
		g.guard.reset()
		return Hold
	}
	if !g.cfg.Breaker.Enabled {
		return Count
	}
	// Weak evidence: a retry, or a released parked record's failure (its
	// key failed before). A released record's success is a first
	// attempt's: the dependency served a record it had not seen.
	weak := t.retry || o.Released && o.Class != OK
	if o.Class == Transient && o.Last && !b.proven {
		// A process that has seen no success yet knows nothing of the
		// dependency: a restart during an outage (a crash loop, a
		// deploy) would otherwise dead-letter the overdue last-tier
		// records it fails before its breaker has the evidence to open,
		// on every restart. Poison is still dead-lettered: once the
		// probes succeed, the held record's next failure counts.
		return g.openForDependency(now, o, weak)
	}
	if b.observe(now, o, weak, during) {
		return g.openForDependency(now, o, weak)
	}
	if o.Class == OK {
		b.grow()
	}
	return Count
}

// openForDependency opens the breaker for the dependency on o (weak: on
// weak evidence only) and returns Hold. The guard's count goes on (see
// guardsOutage). g.mu is held.
func (g *Gate) openForDependency(now time.Time, o Outcome, weak bool) Verdict {
	b := g.breaker
	b.open(now, ReasonDependency, o)
	b.weak = weak
	b.logOpen(o)
	return Hold
}

// guardsOutage counts an answer during a dependency outage for the
// guard, as with the breaker closed (closedVerdict), and when it trips
// the guard the outage becomes the guard's: it opens again, systemic, and
// o is held. A dependency outage's probe answered 404 is a success (the
// dependency answers), and the deliveries under way when it opened are
// routed as they end; the guard used to restart its count at the opening
// and at the close, so an app back from a dependency outage on a wrong
// path put 15 records in the DLQ before the guard stopped it, against
// max_dead_letters 10 (a breaker helper's rig, 7 December). The
// acknowledgements count too: with only the rejections counted, 22
// deliveries under way at the opening, every other one answered 404,
// tripped it (the next breaker round). g.mu is held.
func (g *Gate) guardsOutage(now time.Time, o Outcome) bool {
	b := g.breaker
	if !g.cfg.Guard.Enabled || b.reason != ReasonDependency ||
		o.seenBefore() && !o.heldRejection() || !g.guard.observe(now, o) {
		return false
	}
	b.open(now, ReasonSystemic, o)
	g.guard.report(o, b)
	g.guard.reset()
	return true
}

// Probing reports whether the next admitted delivery would be a probe:
// the engine then offers a record that was not held, if it has one, so
// that the probe tests the dependency rather than a record that failed.
func (g *Gate) Probing(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.breaker
	return b.state == Probing && b.out < b.cfg.Probes || b.state == Open && !now.Before(b.until)
}

// Paused reports whether the source (tier false) or a tier (tier true)
// partition should not fetch at now: the breaker is open, or, for a tier,
// retries are over budget.
func (g *Gate) Paused(now time.Time, tier bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	// The partitions resume a little before the wait is over, so that
	// fresh records are there to probe with: the records held in memory
	// failed already, and may fail for reasons of their own.
	return g.breaker.state == Open && now.Before(g.breaker.resume()) || tier && now.Before(g.overBudget)
}

// Wake returns when a refused Admit may be granted without a delivery
// ending (the breaker's wait, the rate limit's or budget's next token);
// false when nothing is pending.
func (g *Gate) Wake(now time.Time) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if b := g.breaker; b.state == Open {
		for _, t := range []time.Time{b.resume(), b.until} {
			if t.After(now) {
				return t, true
			}
		}
	}
	if g.wake.After(now) {
		return g.wake, true
	}
	return time.Time{}, false
}

// Expired counts a record that was not delivered because it was older
// than max_age, by action ("dead_letter" or "drop").
func (g *Gate) Expired(action string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expired[action]++
}
