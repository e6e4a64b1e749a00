package config_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/config"
)

func TestOverloadKeys(t *testing.T) {
	c, err := config.Parse([]byte(`
app: {url: "http://127.0.0.1:8080/records", max_in_flight: auto, max_rate: 250}
topics:
  - name: orders
    max_age: 24h
    on_expired: drop
    breaker: {enabled: false, window: 50, failure_ratio: 0.8, wait: 2s, probes: 5}
    guard: {max_dead_letters: 3, window: 10s, share: 0.5}
    retry: {tiers: [1s], budget: {ratio: 0.1, min_per_second: 2, window: 30s}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.App.MaxInFlight.Auto() || c.App.MaxInFlight.Ceiling() != config.AutoMaxInFlight || c.App.MaxRate != 250 {
		t.Errorf("app: max_in_flight %v (ceiling %d), max_rate %v; want auto, %d, 250", c.App.MaxInFlight, c.App.MaxInFlight.Ceiling(), c.App.MaxRate, config.AutoMaxInFlight)
	}
	tp := c.Topics[0]
	if tp.MaxAge != 24*time.Hour || tp.OnExpired != config.OnExpiredDrop {
		t.Errorf("expiry: %v %q", tp.MaxAge, tp.OnExpired)
	}
	b := tp.Breaker
	if b.On() || b.Window != 50 || b.FailureRatio != 0.8 || b.Wait != 2*time.Second || b.MaxWait != time.Minute || b.Probes != 5 {
		t.Errorf("breaker: %+v (on %v)", b, b.On())
	}
	if g := tp.Guard; !g.On() || g.MaxDeadLetters != 3 || g.Window != 10*time.Second || g.Share != 0.5 {
		t.Errorf("guard: %+v", g)
	}
	if r := tp.Retry.Budget; r.Ratio != 0.1 || *r.MinPerSecond != 2 || r.Window != 30*time.Second {
		t.Errorf("budget: %+v", r)
	}
}

func TestMaxInFlightFromEnv(t *testing.T) {
	for env, want := range map[string]config.InFlight{"auto": config.InFlightAuto, "8": 8} {
		c, err := config.Parse([]byte(`
app: {url: "http://127.0.0.1:8080/records"}
topics: [{name: orders}]
`), []string{"KRETRY_APP__MAX_IN_FLIGHT=" + env})
		if err != nil {
			t.Fatal(err)
		}
		if c.App.MaxInFlight != want {
			t.Errorf("KRETRY_APP__MAX_IN_FLIGHT=%s: got %v, want %v", env, c.App.MaxInFlight, want)
		}
	}
}

// TestBudgetFloorZeroIsHonoured: retry.budget.min_per_second: 0 is no
// floor, as written, not the default 10 it silently became; absent is 10.
func TestBudgetFloorZeroIsHonoured(t *testing.T) {
	for yaml, want := range map[string]float64{
		"{ratio: 0.1, min_per_second: 0}":   0,
		"{ratio: 0.1, min_per_second: 0.5}": 0.5,
		"{ratio: 0.1}":                      config.DefaultBudgetMinPerSecond,
	} {
		c, err := config.Parse([]byte(`
app: {url: "http://127.0.0.1:8080/records"}
topics:
  - name: orders
    retry: {tiers: [1s], budget: `+yaml+`}
`), nil)
		if err != nil {
			t.Fatalf("budget %s: %v", yaml, err)
		}
		if got := c.Topics[0].Retry.Budget.MinPerSecond; got == nil || *got != want {
			t.Errorf("budget %s: min_per_second %s, want %v", yaml, fmtPtr(got), want)
		}
	}
	// The gate kretry run builds has no floor either: on a quiet source one
	// retry per window gets through, not the default's burst of 10.
	c, err := config.Parse([]byte(`
app: {url: "http://127.0.0.1:8080/records"}
topics: [{name: orders, retry: {tiers: [1s], budget: {ratio: 0.1, min_per_second: 0}}}]
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	g := c.OverloadGate(&c.Topics[0], slog.New(slog.DiscardHandler))
	now, admitted := time.Now(), 0
	for range 5 {
		if _, ok := g.Admit(now, true, 0); ok {
			admitted++
		}
	}
	if admitted != 1 {
		t.Errorf("%d of 5 retries admitted at once with min_per_second 0, want 1 (no floor)", admitted)
	}
}

func fmtPtr(f *float64) string {
	if f == nil {
		return "absent"
	}
	return fmt.Sprint(*f)
}
