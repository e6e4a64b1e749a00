package retrytopics_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

const maxDuration = time.Duration(math.MaxInt64)

func TestDelay(t *testing.T) {
	nan := math.NaN()
	for _, tc := range []struct {
		name       string
		tier       time.Duration
		jitter, u  float64
		retryAfter time.Duration
		want       time.Duration
	}{
		{"no jitter", time.Minute, 0, 0.7, 0, time.Minute},
		{"u zero is the tier", time.Minute, 0.2, 0, 0, time.Minute},
		{"u half", time.Minute, 0.2, 0.5, 0, time.Minute + 6*time.Second},
		{"full jitter", 10 * time.Second, 1, 0.25, 0, 12500 * time.Millisecond},
		{"jitter above 1 is clamped to 1", 10 * time.Second, 7, 0.5, 0, 15 * time.Second},
		{"+Inf jitter is clamped to 1", 10 * time.Second, math.Inf(1), 0.5, 0, 15 * time.Second},
		{"negative jitter is 0", time.Minute, -0.5, 0.5, 0, time.Minute},
		{"-Inf jitter is 0", time.Minute, math.Inf(-1), 0.5, 0, time.Minute},
		{"negative u is 0", time.Minute, 0.5, -3, 0, time.Minute},
		{"NaN jitter is no jitter", time.Minute, nan, 0.5, 0, time.Minute},
		{"NaN u is no jitter", time.Minute, 0.5, nan, 0, time.Minute},
		{"NaN both", time.Minute, nan, nan, 0, time.Minute},
		{"retry-after raises the delay", time.Minute, 0.2, 0.5, 5 * time.Minute, 5 * time.Minute},
		{"retry-after below the delay is ignored", time.Minute, 0.2, 0.5, time.Second, time.Minute + 6*time.Second},
		{"negative retry-after is ignored", time.Minute, 0, 0, -time.Hour, time.Minute},
		{"min retry-after is ignored", time.Minute, 0, 0, time.Duration(math.MinInt64), time.Minute},
		{"huge retry-after", time.Minute, 0.2, 0.5, maxDuration, maxDuration},
		{"negative tier is 0", -time.Minute, 0.5, 0.5, 0, 0},
		{"min tier is 0", time.Duration(math.MinInt64), 1, 0.999, 0, 0},
		{"negative tier with retry-after", -time.Minute, 0.5, 0.5, time.Second, time.Second},
		{"zero tier", 0, 1, 0.999, 0, 0},
		{"max tier, no extra", maxDuration, 0.999, 0, 0, maxDuration},
		{"max tier, jitter saturates", maxDuration, 1, 0.999, 0, maxDuration},
		{"2^62 tier, no saturation yet", 1 << 62, 1, 0.5, 0, 1<<62 + 1<<61},
		{"half max tier plus an hour, jitter saturates", maxDuration/2 + time.Hour, 1, 0.9999999, 0, maxDuration},
		{"near max tier, tiny extra rounds away", maxDuration - 1, 1, 1e-300, 0, maxDuration - 1},
		{"max tier, huge retry-after", maxDuration, 1, 0.999, maxDuration, maxDuration},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := retrytopics.Delay(tc.tier, tc.jitter, tc.u, tc.retryAfter)
			if got != tc.want {
				t.Errorf("Delay(%d, %v, %v, %d) = %d, want %d", tc.tier, tc.jitter, tc.u, tc.retryAfter, got, tc.want)
			}
			if got < 0 {
				t.Errorf("Delay(%d, %v, %v, %d) = %d is negative", tc.tier, tc.jitter, tc.u, tc.retryAfter, got)
			}
		})
	}
}

// TestDelayBounds checks, over many random inputs from every magnitude, that
// the delay never falls below the tier, stays in [tier, tier·(1+jitter)),
// equals tier + u·jitter·tier up to float rounding, and saturates at the
// largest duration instead of wrapping.
func TestDelayBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200_000 {
		var tier time.Duration
		switch rng.IntN(4) {
		case 0:
			tier = time.Duration(rng.Int64N(int64(48 * time.Hour)))
		case 1:
			tier = time.Duration(rng.Int64())
		case 2:
			tier = maxDuration - time.Duration(rng.Int64N(1e15))
		default:
			tier = time.Duration(rng.Int64N(1000))
		}
		var jitter float64
		switch rng.IntN(10) {
		case 0:
			jitter = 0
		case 1:
			jitter = 1
		default:
			jitter = rng.Float64()
		}
		u := rng.Float64()

		d := retrytopics.Delay(tier, jitter, u, 0)
		if d < tier {
			t.Fatalf("#%d Delay(%d, %v, %v, 0) = %d, below the tier", i, tier, jitter, u, d)
		}
		extra := float64(d - tier) // d ≥ tier ≥ 0, no overflow
		if extra > float64(tier)*jitter {
			t.Fatalf("#%d Delay(%d, %v, %v, 0) = %d, not below tier·(1+jitter)", i, tier, jitter, u, d)
		}
		if u < 1-1e-9 && float64(tier)*jitter >= 2 && d != maxDuration && extra >= float64(tier)*jitter {
			t.Fatalf("#%d Delay(%d, %v, %v, 0) = %d reaches tier·(1+jitter), want it strictly below", i, tier, jitter, u, d)
		}
		exact := float64(tier) + float64(tier)*jitter*u
		switch {
		case exact > float64(math.MaxInt64)*(1+1e-12):
			if d != maxDuration {
				t.Fatalf("#%d Delay(%d, %v, %v, 0) = %d, want saturation at %d", i, tier, jitter, u, d, maxDuration)
			}
		case exact < float64(math.MaxInt64)*(1-1e-12):
			if diff := math.Abs(float64(d) - exact); diff > 1+exact*1e-15 {
				t.Fatalf("#%d Delay(%d, %v, %v, 0) = %d, want about %.0f (off by %.0f)", i, tier, jitter, u, d, exact, diff)
			}
		}

		// Retry-After is a lower bound and never lowers the delay.
		ra := time.Duration(rng.Int64())
		if got := retrytopics.Delay(tier, jitter, u, ra); got != max(d, ra) {
			t.Fatalf("#%d Delay(%d, %v, %v, %d) = %d, want max(%d, %d)", i, tier, jitter, u, ra, got, d, ra)
		}
	}
}

func TestDueTime(t *testing.T) {
	fixed := time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.UTC)
	nearMax := time.Unix(math.MaxInt64-62135596801, 999_999_999) // close to the largest time.Time
	for _, tc := range []struct {
		name string
		now  time.Time
		d    time.Duration
		want time.Time // zero: only check "not before now"
	}{
		{"zero delay", fixed, 0, ceilMS(fixed)},
		{"one minute", fixed, time.Minute, ceilMS(fixed.Add(time.Minute))},
		{"whole millisecond stays", fixed.Truncate(time.Millisecond), time.Second, fixed.Truncate(time.Millisecond).Add(time.Second)},
		{"negative delay is now", fixed, -time.Hour, fixed},
		{"min delay is now", fixed, time.Duration(math.MinInt64), fixed},
		{"max delay", fixed, maxDuration, ceilMS(fixed.Add(maxDuration))},
		{"max delay from the wall clock", time.Now(), maxDuration, time.Time{}},
		{"max delay near the end of time", nearMax, maxDuration, time.Time{}},
		{"zero time, max delay", time.Time{}, maxDuration, ceilMS(time.Time{}.Add(maxDuration))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := retrytopics.DueTime(tc.now, tc.d)
			if got.Before(tc.now) {
				t.Fatalf("DueTime(%v, %d) = %v, before now", tc.now, tc.d, got)
			}
			if tc.d > 0 && !got.After(tc.now) && tc.now != nearMax {
				t.Errorf("DueTime(%v, %d) = %v, not after now", tc.now, tc.d, got)
			}
			if !tc.want.IsZero() && !got.Equal(tc.want) {
				t.Errorf("DueTime(%v, %d) = %v, want %v", tc.now, tc.d, got, tc.want)
			}
		})
	}
}

// ceilMS rounds t up to the millisecond, as kretry-due-time is written.
func ceilMS(t time.Time) time.Time {
	if r := t.Truncate(time.Millisecond); r.Before(t) {
		return r.Add(time.Millisecond)
	}
	return t
}

func testPlan() *retrytopics.Plan {
	return &retrytopics.Plan{
		Source: "orders",
		Tiers: []retrytopics.Tier{
			{Topic: "orders.retry.1m", Delay: time.Minute},
			{Topic: "orders.retry.10m", Delay: 10 * time.Minute},
			{Topic: "orders.retry.1h", Delay: time.Hour},
		},
		DLQ:    "orders.dlq",
		Jitter: 0.2,
	}
}

func TestPlanRoute(t *testing.T) {
	transient := &delivery.Verdict{Class: delivery.ClassTransient, Status: 503}
	permanent := &delivery.Verdict{Class: delivery.ClassPermanent, Status: 422}
	retryAfter := &delivery.Verdict{Class: delivery.ClassTransient, Status: 429, RetryAfter: 2 * time.Hour}
	retryAfter90s := &delivery.Verdict{Class: delivery.ClassTransient, Status: 429, RetryAfter: 90 * time.Second}
	retryAfter70s := &delivery.Verdict{Class: delivery.ClassTransient, Status: 429, RetryAfter: 70 * time.Second}
	retryAfter50s := &delivery.Verdict{Class: delivery.ClassTransient, Status: 429, RetryAfter: 50 * time.Second}
	full := testPlan()
	noTiers := &retrytopics.Plan{Source: "orders", DLQ: "orders.dlq", Jitter: 0.2}

	dlq := func(c delivery.Class) retrytopics.Route {
		return retrytopics.Route{Action: retrytopics.DeadLetter, Topic: "orders.dlq", Class: c}
	}
	retry := func(stage int, topic string, d time.Duration) retrytopics.Route {
		return retrytopics.Route{Action: retrytopics.Retry, Stage: stage, Topic: topic, Class: delivery.ClassTransient, Delay: d}
	}
	for _, tc := range []struct {
		name  string
		plan  *retrytopics.Plan
		stage int
		v     *delivery.Verdict
		u     float64
		want  retrytopics.Route
	}{
		{"success from source", full, 0, nil, 0.5, retrytopics.Route{Action: retrytopics.Done}},
		{"success from tier 2", full, 2, nil, 0.5, retrytopics.Route{Action: retrytopics.Done}},
		{"success from last tier", full, 3, nil, 0.5, retrytopics.Route{Action: retrytopics.Done}},

		{"permanent from source", full, 0, permanent, 0.5, dlq(delivery.ClassPermanent)},
		{"permanent from tier 1", full, 1, permanent, 0.5, dlq(delivery.ClassPermanent)},
		{"permanent from last tier", full, 3, permanent, 0.5, dlq(delivery.ClassPermanent)},
		{"permanent from unknown stage", full, -1, permanent, 0.5, dlq(delivery.ClassPermanent)},
		{"permanent without tiers", noTiers, 0, permanent, 0.5, dlq(delivery.ClassPermanent)},

		{"transient from source", full, 0, transient, 0, retry(1, "orders.retry.1m", time.Minute)},
		{"transient from source, jittered", full, 0, transient, 0.5, retry(1, "orders.retry.1m", 66*time.Second)},
		{"transient from tier 1 takes tier 2's delay", full, 1, transient, 0, retry(2, "orders.retry.10m", 10*time.Minute)},
		{"transient from tier 1, jittered", full, 1, transient, 0.5, retry(2, "orders.retry.10m", 11*time.Minute)},
		{"transient from tier 2 takes tier 3's delay", full, 2, transient, 0.25, retry(3, "orders.retry.1h", 63*time.Minute)},
		{"retry-after raises the delay", full, 0, retryAfter90s, 0.5, retry(2, "orders.retry.10m", 11*time.Minute)},
		{"retry-after within the tier raises it", full, 0, retryAfter50s, 0, retry(1, "orders.retry.1m", time.Minute)},
		{"retry-after in the jitter range", full, 0, retryAfter70s, 0, retry(1, "orders.retry.1m", 70*time.Second)},
		{"retry-after past every tier is capped at the last", full, 0, retryAfter, 0, retry(3, "orders.retry.1h", 72*time.Minute)},
		{"retry-after below the tier", full, 2, retryAfter, 0, retry(3, "orders.retry.1h", 72*time.Minute)},
		{"transient from last tier is exhausted", full, 3, transient, 0.5, dlq(delivery.ClassExhausted)},
		{"retry-after from last tier is exhausted", full, 3, retryAfter, 0.5, dlq(delivery.ClassExhausted)},
		{"transient without tiers is exhausted", noTiers, 0, transient, 0.5, dlq(delivery.ClassExhausted)},
		{"transient from unknown stage is exhausted", full, -1, transient, 0.5, dlq(delivery.ClassExhausted)},

		// Backoff at huge attempt counts: a stage far past the last tier
		// must not index out of range.
		{"transient from stage MaxInt32", full, math.MaxInt32, transient, 0.5, dlq(delivery.ClassExhausted)},
		{"transient from stage MinInt32", full, math.MinInt32, transient, 0.5, dlq(delivery.ClassExhausted)},
		{"transient from stage MaxInt", full, math.MaxInt, transient, 0.999, dlq(delivery.ClassExhausted)},
		{"transient from stage MinInt", full, math.MinInt, transient, 0.999, dlq(delivery.ClassExhausted)},
		{"transient from stage MaxInt32 without tiers", noTiers, math.MaxInt32, transient, 0.5, dlq(delivery.ClassExhausted)},
		{"permanent from stage MaxInt32", full, math.MaxInt32, permanent, 0.5, dlq(delivery.ClassPermanent)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.plan.Route(tc.stage, tc.v, tc.u); got != tc.want {
				t.Errorf("Route(%d, %+v, %v) = %+v, want %+v", tc.stage, tc.v, tc.u, got, tc.want)
			}
		})
	}
}

// TestPlanRouteSaturates routes through a tier whose delay is the largest
// duration: the jitter must not wrap it negative.
func TestPlanRouteSaturates(t *testing.T) {
	p := &retrytopics.Plan{
		Source: "orders",
		Tiers:  []retrytopics.Tier{{Topic: "orders.retry.forever", Delay: maxDuration}},
		DLQ:    "orders.dlq",
		Jitter: 1,
	}
	got := p.Route(0, &delivery.Verdict{Class: delivery.ClassTransient}, 0.999)
	if got.Action != retrytopics.Retry || got.Delay != maxDuration {
		t.Fatalf("Route = %+v, want a retry with delay %d", got, maxDuration)
	}
	if due := retrytopics.DueTime(time.Now(), got.Delay); due.Before(time.Now()) {
		t.Fatalf("DueTime(now, %d) = %v, before now", got.Delay, due)
	}
}

func TestPlanStage(t *testing.T) {
	p := testPlan()
	for _, tc := range []struct {
		topic string
		want  int
	}{
		{"orders", 0},
		{"orders.retry.1m", 1},
		{"orders.retry.10m", 2},
		{"orders.retry.1h", 3},
		{"orders.dlq", -1},
		{"orders.parking", -1},
		{"payments", -1},
		{"", -1},
		{"Orders", -1},
	} {
		if got := p.Stage(tc.topic); got != tc.want {
			t.Errorf("Stage(%q) = %d, want %d", tc.topic, got, tc.want)
		}
	}
	noTiers := &retrytopics.Plan{Source: "orders", DLQ: "orders.dlq"}
	if got := noTiers.Stage("orders.retry.1m"); got != -1 {
		t.Errorf("Stage of a tier on a plan without tiers = %d, want -1", got)
	}
}
