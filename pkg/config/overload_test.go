package config_test

import (
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
	if r := tp.Retry.Budget; r.Ratio != 0.1 || r.MinPerSecond != 2 || r.Window != 30*time.Second {
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
