package overload

import (
	"time"

	"golang.org/x/time/rate"
)

// BudgetConfig configures the retry budget (config.RetryBudget).
type BudgetConfig struct {
	// Ratio in [0, 1] of the deliveries over Window that may be retries;
	// 0 turns the budget off.
	Ratio float64
	// MinPerSecond retries are allowed whatever the ratio (a token bucket
	// with a burst of one second's worth); 0 still allows one retry per
	// Window while no first attempt is in it, so that a quiet source's
	// retries are not held for ever.
	MinPerSecond float64
	Window       time.Duration
}

// budget counts deliveries and retries per second over the window.
type budget struct {
	cfg   BudgetConfig
	floor *rate.Limiter
	secs  []second // ring, one per second of the window
}

type second struct {
	at                  int64 // unix second
	deliveries, retries int
}

func newBudget(cfg BudgetConfig) *budget {
	if cfg.Ratio <= 0 {
		return nil
	}
	n := max(1, int(cfg.Window/time.Second))
	// Without a floor, retries alone are never within the ratio: on a
	// quiet source (no first attempt in the window) they would wait for
	// ever. One retry per window gets through then.
	floor := rate.Every(time.Duration(n) * time.Second)
	if cfg.MinPerSecond > 0 {
		floor = rate.Limit(cfg.MinPerSecond)
	}
	return &budget{cfg: cfg, floor: rate.NewLimiter(floor, max(1, int(cfg.MinPerSecond))), secs: make([]second, n)}
}

// sums returns the deliveries and retries of the window ending at now.
func (b *budget) sums(now time.Time) (deliveries, retries int) {
	cur := now.Unix()
	for _, s := range b.secs {
		if cur-s.at < int64(len(b.secs)) {
			deliveries += s.deliveries
			retries += s.retries
		}
	}
	return deliveries, retries
}

// allows reports whether one more retry stays within the ratio; failing
// that, whether the floor has a token (which it then takes).
func (b *budget) allows(now time.Time) bool {
	d, r := b.sums(now)
	if float64(r+1) <= b.cfg.Ratio*float64(d+1) {
		return true
	}
	if b.cfg.MinPerSecond <= 0 && r < d {
		return false // first attempts flow: the ratio alone decides
	}
	return b.floor.AllowN(now, 1)
}

// next is when the floor has its next token.
func (b *budget) next(now time.Time) time.Time {
	if b.cfg.MinPerSecond <= 0 {
		return now.Add(time.Second)
	}
	return now.Add(time.Duration(float64(time.Second) / b.cfg.MinPerSecond))
}

// record counts one delivery started at now.
func (b *budget) record(now time.Time, retry bool) {
	cur := now.Unix()
	s := &b.secs[int(cur%int64(len(b.secs)))]
	if s.at != cur {
		*s = second{at: cur}
	}
	s.deliveries++
	if retry {
		s.retries++
	}
}

// ratio is retries ÷ deliveries over the window (0 without deliveries).
func (b *budget) ratio(now time.Time) float64 {
	d, r := b.sums(now)
	if d == 0 {
		return 0
	}
	return float64(r) / float64(d)
}
