package retrytopics

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
)

// Tier is one retry stage: its topic and its delay.
type Tier struct {
	Topic string
	Delay time.Duration
}

// Plan is the route of one source topic: its tiers, in order of increasing
// delay, and its DLQ.
type Plan struct {
	Source string
	Tiers  []Tier
	DLQ    string
	// Jitter in [0, 1] stretches each delay (see Delay).
	Jitter float64
}

// Stage returns the stage index of topic: 0 for the source, i for tier i
// (1-based), -1 for a topic that is not part of the plan.
func (p *Plan) Stage(topic string) int {
	if topic == p.Source {
		return 0
	}
	for i, t := range p.Tiers {
		if t.Topic == topic {
			return i + 1
		}
	}
	return -1
}

// Action says what happens to a record after one delivery.
type Action int

const (
	// Done: the application acknowledged the record.
	Done Action = iota
	// Retry: the record moves to tier Route.Stage.
	Retry
	// DeadLetter: the record moves to the DLQ.
	DeadLetter
)

// Route is where one delivered record goes next.
type Route struct {
	Action Action
	// Stage is the tier (1-based) a Retry goes to.
	Stage int
	// Topic is the destination topic ("" for Done).
	Topic string
	// Class is the kretry-error-class written on the moved record.
	Class delivery.Class
	// Delay is the wait before the tier may deliver it (Retry only).
	Delay time.Duration
}

// Route decides the route of a record delivered from stage (0 = source,
// i = tier i) whose delivery failed with verdict v; pass a nil v for a
// success. A permanent failure goes to the DLQ from any stage; a transient
// one goes to the next tier with the NEXT tier's delay (stretched by jitter
// and raised to v.RetryAfter), or to the DLQ as exhausted after the last
// tier. A Retry-After longer than the next tier's longest jittered delay
// (tier·(1+jitter)) skips to the first tier that can honour it (the last
// tier at most, where it is capped at that tier's longest jittered delay). u is a uniform random
// number in [0, 1) for the jitter.
func (p *Plan) Route(stage int, v *delivery.Verdict, u float64) Route {
	switch {
	case v == nil:
		return Route{Action: Done}
	case v.Class == delivery.ClassPermanent:
		return Route{Action: DeadLetter, Topic: p.DLQ, Class: delivery.ClassPermanent}
	case stage < 0 || stage >= len(p.Tiers):
		return Route{Action: DeadLetter, Topic: p.DLQ, Class: delivery.ClassExhausted}
	}
	// A Retry-After longer than the next tier's longest jittered delay skips
	// to the first tier that can honour it: a tier partition is read in order, so one
	// record waiting far longer than its tier would hold up every record
	// behind it. Past the longest tier, Retry-After is honoured up to that
	// tier's longest jittered delay.
	k := stage
	for k < len(p.Tiers)-1 && p.LongestDelay(k) < v.RetryAfter {
		k++
	}
	next := p.Tiers[k]
	return Route{
		Action: Retry,
		Stage:  k + 1,
		Topic:  next.Topic,
		Class:  delivery.ClassTransient,
		Delay:  Delay(next.Delay, p.Jitter, u, min(v.RetryAfter, p.LongestDelay(k))),
	}
}

// Jitter returns a uniform random number in [0, 1) for Route.
func Jitter() float64 { return rand.Float64() }

// Delay is tier stretched by jitter: tier + u·jitter·tier, with u in [0, 1)
// and jitter in [0, 1], so the delay never falls below the tier's nominal
// delay and records that failed together spread over [tier, tier·(1+jitter)).
// retryAfter (from a Retry-After answer) is a lower bound on the result.
// The arithmetic saturates at the largest time.Duration instead of
// overflowing, whatever the inputs.
func Delay(tier time.Duration, jitter, u float64, retryAfter time.Duration) time.Duration {
	tier = max(tier, 0)
	jitter = min(max(jitter, 0), 1)
	u = min(max(u, 0), 1)
	if math.IsNaN(jitter) || math.IsNaN(u) {
		jitter, u = 0, 0
	}
	extra := float64(tier) * jitter * u
	d := tier
	if extra >= float64(math.MaxInt64-int64(tier)) {
		d = time.Duration(math.MaxInt64)
	} else {
		d += time.Duration(extra)
	}
	return max(d, retryAfter)
}

// DueTime is now + d, saturating instead of overflowing, rounded up to the
// millisecond (kretry-due-time carries milliseconds, and a truncated due time
// would shorten the delay); it is the value of kretry-due-time for a record
// moved at now.
func DueTime(now time.Time, d time.Duration) time.Time {
	due := now.Add(d)
	if r := due.Truncate(time.Millisecond); r.Before(due) {
		due = r.Add(time.Millisecond)
	}
	if due.Before(now) { // cannot happen for d ≥ 0 in Go's time range; guard anyway
		return now
	}
	return due
}

// LongestDelay is the longest wait tier i (0-based) gives a record by
// design: its delay stretched by the full jitter, tier·(1+jitter) (see
// Delay). A Retry-After does not raise it: Route caps a Retry-After there.
func (p *Plan) LongestDelay(i int) time.Duration {
	return Delay(p.Tiers[i].Delay, p.Jitter, 1, 0)
}
