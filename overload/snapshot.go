package overload

import "time"

// Snapshot is the Gate's state and counters, for metrics and /readyz.
type Snapshot struct {
	State  State
	Reason Reason // of the current or last opening
	// Since is when the current outage began (zero when closed).
	Since time.Time
	// Opened counts openings by reason; Held the failed deliveries whose
	// attempt did not count.
	Opened map[Reason]int64
	Held   int64
	// Limit is the in-flight limit in force.
	Limit int
	// BudgetDenied counts refused retries; RetryRatio is retries ÷
	// deliveries over the budget window (0 without a budget).
	BudgetDenied int64
	RetryRatio   float64
	// Expired counts expired records by action.
	Expired map[string]int64
}

// Snapshot returns the current state and counters.
func (g *Gate) Snapshot(now time.Time) Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	b := g.breaker
	s := Snapshot{State: b.state, Reason: b.reason, Held: b.held, BudgetDenied: g.budgetDenied,
		Opened: map[Reason]int64{}, Expired: map[string]int64{}, Limit: g.cfg.MaxInFlight}
	if b.state != Closed {
		s.Since = b.since
	}
	for k, v := range b.opened {
		s.Opened[k] = v
	}
	for k, v := range g.expired {
		s.Expired[k] = v
	}
	switch {
	case b.state != Closed:
		s.Limit = b.cfg.Probes
	case g.limiter != nil:
		s.Limit = g.limiter.Limit()
	}
	if b.state == Closed && b.ramp > 0 {
		s.Limit = min(s.Limit, b.ramp)
	}
	if g.budget != nil {
		s.RetryRatio = g.budget.ratio(now)
	}
	return s
}
