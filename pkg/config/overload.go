package config

import (
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Overload control (issue 11; docs/OVERLOAD.md): the keys below say when
// kretry stops delivering to a failing dependency, how fast it delivers to
// a healthy one and how old a record may grow. Every one is optional.
//
//	app:
//	  max_in_flight: auto        # or a number (default 64)
//	  max_rate: 200              # records/s per topic, 0 = no limit
//	topics:
//	  - name: orders
//	    max_age: 24h             # 0 = records never expire
//	    on_expired: dead_letter  # or drop
//	    breaker: {enabled: true, window: 20, failure_ratio: 0.5, wait: 1s, max_wait: 1m, probes: 3}
//	    guard:   {enabled: true, max_dead_letters: 10, window: 1m, share: 0.9}
//	    retry:
//	      budget: {ratio: 0.2, min_per_second: 10, window: 10s}

// InFlight is app.max_in_flight: a number of deliveries, or InFlightAuto
// (written "auto"), an adaptive limit between 1 and AutoMaxInFlight that
// grows while the app's latency holds and shrinks when it rises.
type InFlight int

// InFlightAuto is app.max_in_flight: auto.
const InFlightAuto InFlight = -1

// AutoMaxInFlight and AutoInitialInFlight bound and start the adaptive
// in-flight limit of app.max_in_flight: auto (deliveries per topic).
const (
	AutoMaxInFlight     = 256
	AutoInitialInFlight = 16
)

// Bounds of the overload keys that Validate enforces besides their signs.
const (
	// MaxMaxInFlight bounds app.max_in_flight: past any app's concurrency,
	// and small enough for the engine's arithmetic on it (records per
	// poll, the retries' share) not to overflow.
	MaxMaxInFlight = 1_000_000
	// MinMaxRate is the smallest app.max_rate above 0, in records/s (one
	// record every 1000s): below it the limiter waits for ever.
	MinMaxRate = 0.001
	// MaxBudgetWindow bounds retry.budget.window: the budget counts per
	// second of it, on every retry. Finagle's RetryBudget bounds its ttl
	// to [1s, 60s] the same way.
	MaxBudgetWindow = time.Minute
)

// Auto reports whether the limit is adaptive.
func (n InFlight) Auto() bool { return n == InFlightAuto }

// Ceiling is the most deliveries that may be in flight: n, or
// AutoMaxInFlight when adaptive.
func (n InFlight) Ceiling() int {
	if n.Auto() {
		return AutoMaxInFlight
	}
	return int(n)
}

func (n InFlight) String() string {
	if n.Auto() {
		return "auto"
	}
	return strconv.Itoa(int(n))
}

var inFlightType = reflect.TypeOf(InFlight(0))

// inFlightHook decodes "auto" into InFlightAuto; numbers (and numeric
// strings, from the environment) decode as integers.
func inFlightHook(from, to reflect.Type, data any) (any, error) {
	if to != inFlightType || from.Kind() != reflect.String {
		return data, nil
	}
	s := strings.TrimSpace(reflect.ValueOf(data).String())
	if s == "auto" {
		return int(InFlightAuto), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return nil, &valueError{value: s, msg: `is neither a number nor "auto"`}
	}
	return checkInFlight(n)
}

// inFlightNumberHook refuses a negative number for app.max_in_flight: -1
// would otherwise decode as InFlightAuto.
func inFlightNumberHook(from, to reflect.Type, data any) (any, error) {
	if to != inFlightType {
		return data, nil
	}
	switch v := reflect.ValueOf(data); {
	case v.CanInt() && v.Int() < 0:
		return checkInFlight(int(v.Int()))
	case v.CanFloat() && v.Float() < 0:
		return nil, &valueError{value: fmtFloat(v.Float()), msg: `must be at least 1, or "auto"`}
	}
	return data, nil
}

func checkInFlight(n int) (any, error) {
	if n < 0 {
		return nil, &valueError{value: strconv.Itoa(n), msg: `must be at least 1, or "auto"`}
	}
	return n, nil
}

// On-expired actions for Topic.OnExpired.
const (
	// OnExpiredDeadLetter moves an expired record to the DLQ with
	// kretry-error-class "expired".
	OnExpiredDeadLetter = "dead_letter"
	// OnExpiredDrop commits past an expired record without writing it
	// anywhere; it is counted (kretry.records.expired).
	OnExpiredDrop = "drop"
)

// Defaults of the overload keys (used where the key is absent or 0).
const (
	DefaultBreakerWindow       = 20
	DefaultBreakerFailureRatio = 0.5
	DefaultBreakerWait         = time.Second
	DefaultBreakerMaxWait      = time.Minute
	DefaultBreakerProbes       = 3
	DefaultGuardMaxDeadLetters = 10
	DefaultGuardWindow         = time.Minute
	DefaultGuardShare          = 0.9
	DefaultBudgetMinPerSecond  = 10.0
	DefaultBudgetWindow        = 10 * time.Second
)

// MaxBreakerProbes bounds breaker.probes: the probes are real deliveries
// sent to a dependency that was failing, and a majority must succeed to
// close the breaker; more than this is a flood, not a probe.
const MaxBreakerProbes = 100

// Breaker is the dependency breaker of one topic: when most recent
// deliveries fail transiently (408/425/429/5xx as classified, timeouts,
// refused connections) across many keys, kretry stops delivering (source
// and tier partitions pause, records stay where they are, no attempt is
// consumed), probes after a jittered wait that grows per failed probe
// round, and resumes gradually when the probes succeed.
type Breaker struct {
	// Enabled turns the breaker on. Default true.
	Enabled *bool `koanf:"enabled"`
	// Window is how many recent deliveries the failure ratio is taken
	// over (default 20). A key's failures count once per window, so one
	// key failing again and again cannot open the breaker.
	Window int `koanf:"window"`
	// FailureRatio in (0, 1]: the breaker opens when this share of the
	// window failed transiently (default 0.5).
	FailureRatio float64 `koanf:"failure_ratio"`
	// Wait is the first wait before probing (default 1s); it doubles per
	// failed probe round, up to MaxWait (default 1m), each stretched by a
	// random 0..20%.
	Wait    time.Duration `koanf:"wait"`
	MaxWait time.Duration `koanf:"max_wait"`
	// Probes is how many deliveries probe the dependency when the wait is
	// over (default 3, at most MaxBreakerProbes); a majority must succeed to close the breaker, after which
	// the in-flight limit grows by one per success back to max_in_flight.
	Probes int `koanf:"probes"`
}

// On reports whether the breaker is enabled (nil means the default, on).
func (b *Breaker) On() bool { return b.Enabled == nil || *b.Enabled }

// Guard is the systemic permanent failure guard of one topic: the same
// permanent answer (one status, or a permanent handler error) for many
// different records of different keys within Window, and for at least
// Share of the last MaxDeadLetters+1 deliveries in it, is taken for a fault of the dependency
// (a wrong app.url answering 404, a 401 classified permanent), not for
// poison. Once MaxDeadLetters such records were dead-lettered, kretry
// stops and waits as the breaker does, logs one line naming what it saw,
// and resumes when probes succeed. One record or key failing while the
// rest succeed is still dead-lettered at once.
type Guard struct {
	// Enabled turns the guard on. Default true.
	Enabled *bool `koanf:"enabled"`
	// MaxDeadLetters bounds the records dead-lettered with the same
	// answer before the guard stops delivery (default 10, at least 2).
	MaxDeadLetters int `koanf:"max_dead_letters"`
	// Window is how far back the guard looks (default 1m).
	Window time.Duration `koanf:"window"`
	// Share in (0, 1] of the last MaxDeadLetters+1 deliveries in the
	// window that must have that answer (default 0.9).
	Share float64 `koanf:"share"`
}

// On reports whether the guard is enabled (nil means the default, on).
func (g *Guard) On() bool { return g.Enabled == nil || *g.Enabled }

// RetryBudget caps the deliveries of tier records (retries) at Ratio of
// all deliveries over Window, plus MinPerSecond (Finagle's and gRPC's retry
// budget). Over the budget, due tier records wait in their paused
// partitions, never dropped, and first attempts keep their capacity.
type RetryBudget struct {
	// Ratio in [0, 1]; 0 (the default) turns the budget off.
	Ratio float64 `koanf:"ratio"`
	// MinPerSecond retries per second are always allowed (nil: the
	// default, 10/s). 0 is honoured: no floor, retries only within the
	// ratio, except one per Window while no first attempt is in it, so a
	// quiet source's retries are not held for ever (overload.BudgetConfig).
	MinPerSecond *float64 `koanf:"min_per_second"`
	// Window the ratio is taken over (default 10s, at least 1s).
	Window time.Duration `koanf:"window"`
}

// setOverloadDefaults fills the overload defaults of a topic whose keys
// are absent or 0 (SetDefaults calls it); breaker.enabled and
// guard.enabled absent become true.
func (t *Topic) setOverloadDefaults() {
	if t.OnExpired == "" {
		t.OnExpired = OnExpiredDeadLetter
	}
	b := &t.Breaker
	if b.Enabled == nil {
		b.Enabled = ptr(true)
	}
	b.Window = or(b.Window, DefaultBreakerWindow)
	b.FailureRatio = or(b.FailureRatio, DefaultBreakerFailureRatio)
	b.Wait = or(b.Wait, DefaultBreakerWait)
	b.MaxWait = or(b.MaxWait, max(DefaultBreakerMaxWait, b.Wait))
	b.Probes = or(b.Probes, DefaultBreakerProbes)
	g := &t.Guard
	if g.Enabled == nil {
		g.Enabled = ptr(true)
	}
	g.MaxDeadLetters = or(g.MaxDeadLetters, DefaultGuardMaxDeadLetters)
	g.Window = or(g.Window, DefaultGuardWindow)
	g.Share = or(g.Share, DefaultGuardShare)
	r := &t.Retry.Budget
	if r.MinPerSecond == nil { // 0 is honoured: no floor
		r.MinPerSecond = ptr(DefaultBudgetMinPerSecond)
	}
	r.Window = or(r.Window, DefaultBudgetWindow)
}

func ptr[T any](v T) *T { return &v }

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// overload validates the overload keys of app and of topic p:
//
//   - app.max_in_flight: 1 to MaxMaxInFlight, or auto.
//   - app.max_rate: 0 (no limit), or MinMaxRate records/s or more.
//   - max_age: 0 (never) or more; on_expired: dead_letter or drop.
//   - breaker.window: at least 2; breaker.failure_ratio in (0, 1];
//     breaker.wait greater than 0 and at most breaker.max_wait;
//     breaker.probes: 1 to MaxBreakerProbes.
//   - guard.max_dead_letters: at least 2; guard.window greater than 0;
//     guard.share in (0, 1].
//   - retry.budget.ratio in [0, 1]; retry.budget.min_per_second at least
//     0 (0: no floor, honoured); retry.budget.window from 1s to MaxBudgetWindow (1m).
func (v *validator) overload(p string, t *Topic) {
	if t.MaxAge < 0 {
		v.add(p+".max_age", "%q must not be negative (0: records never expire)", fmtDuration(t.MaxAge))
	}
	v.oneOf(p+".on_expired", t.OnExpired, OnExpiredDeadLetter, OnExpiredDrop)
	b := &t.Breaker
	if b.Window < 2 {
		v.add(p+".breaker.window", "%q must be at least 2 deliveries", fmtInt(b.Window))
	}
	v.ratio(p+".breaker.failure_ratio", b.FailureRatio, false)
	if b.Wait <= 0 {
		v.add(p+".breaker.wait", "%q must be greater than 0", fmtDuration(b.Wait))
	} else if b.MaxWait < b.Wait {
		v.add(p+".breaker.max_wait", "%q must be at least breaker.wait (%q)", fmtDuration(b.MaxWait), fmtDuration(b.Wait))
	}
	if b.Probes < 1 || b.Probes > MaxBreakerProbes {
		v.add(p+".breaker.probes", "%q must be from 1 to %d deliveries", fmtInt(b.Probes), MaxBreakerProbes)
	}
	g := &t.Guard
	if g.MaxDeadLetters < 2 {
		v.add(p+".guard.max_dead_letters", "%q must be at least 2 (one record failing alone is poison, not a systemic failure)", fmtInt(g.MaxDeadLetters))
	}
	if g.Window <= 0 {
		v.add(p+".guard.window", "%q must be greater than 0", fmtDuration(g.Window))
	}
	v.ratio(p+".guard.share", g.Share, false)
	r := &t.Retry.Budget
	v.ratio(p+".retry.budget.ratio", r.Ratio, true)
	if m := r.MinPerSecond; m != nil && !(*m >= 0) { // NaN too
		v.add(p+".retry.budget.min_per_second", "%q must be 0 (no floor) or a positive number of retries/s", fmtFloat(*m))
	}
	if r.Window < time.Second {
		v.add(p+".retry.budget.window", "%q must be at least 1s", fmtDuration(r.Window))
	} else if r.Window > MaxBudgetWindow {
		v.add(p+".retry.budget.window", "%q must be at most 1m (Finagle's RetryBudget bounds its ttl to [1s, 60s] too)", fmtDuration(r.Window))
	}
}

func (v *validator) appOverload(a *App) {
	switch {
	case a.MaxInFlight < 1 && !a.MaxInFlight.Auto():
		v.add("app.max_in_flight", "%q must be at least 1, or \"auto\"", fmtInt(int(a.MaxInFlight)))
	case a.MaxInFlight > MaxMaxInFlight:
		v.add("app.max_in_flight", "%q must be at most %d, or \"auto\"", fmtInt(int(a.MaxInFlight)), MaxMaxInFlight)
	}
	switch {
	case !(a.MaxRate >= 0):
		v.add("app.max_rate", "%q must be 0 (no limit) or a positive number of records/s", fmtFloat(a.MaxRate))
	case a.MaxRate > 0 && a.MaxRate < MinMaxRate:
		v.add("app.max_rate", "%q must be 0 (no limit) or at least %s records/s (one record every 1000s)", fmtFloat(a.MaxRate), fmtFloat(MinMaxRate))
	}
}

// ratio checks a share: in (0, 1], or [0, 1] when zero is allowed.
func (v *validator) ratio(path string, r float64, zeroOK bool) {
	if r > 1 || !(r > 0 || zeroOK && r == 0) {
		lo := "greater than 0"
		if zeroOK {
			lo = "at least 0"
		}
		v.add(path, "%q must be %s and at most 1", fmtFloat(r), lo)
	}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
