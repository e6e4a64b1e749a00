package gameday

import "time"

// Plan is the game day's schedule and the limits its checks hold the
// queue to. Quick and Full are the two that `kretry gameday` runs; every
// figure is printed in the report.
type Plan struct {
	Name string
	// Partitions of the source topic; Keys of the steady load.
	Partitions int32
	Keys       int
	// The dependency: AppWorkers records at a time, ServiceTime each, so
	// its capacity is AppWorkers ÷ ServiceTime records/s; SlowServiceTime
	// while it slows down. kretry delivers with app.max_in_flight =
	// MaxInFlight and app.timeout = AppTimeout.
	AppWorkers      int
	ServiceTime     time.Duration
	SlowServiceTime time.Duration
	MaxInFlight     int
	AppTimeout      time.Duration
	// kretry's retry tiers and jitter (the blocking peer's backoffs are
	// the same delays).
	Tiers  []time.Duration
	Jitter float64
	// SteadyRate is the paced load in records/s; SpikeRate the rate for
	// SpikeFor (several times the drain rate).
	SteadyRate float64
	SteadyFor  time.Duration
	SpikeRate  float64
	SpikeFor   time.Duration
	// SlowFor is how long the dependency is slow, then FailFor how long it
	// answers 503 to everything (longer than the tier chain, so that a
	// queue without a breaker walks records into the DLQ).
	SlowFor time.Duration
	FailFor time.Duration
	// Burst is the number of records of the synchronised failure: all
	// produced at once, of distinct keys, at the start of a blip of the
	// dependency (503 to everything for BlipFor), so that they fail
	// together.
	Burst   int
	BlipFor time.Duration
	// Settle bounds the wait for a phase to drain before the next starts;
	// DrainSettle the last wait, after the load stops, that nothing_lost
	// is judged after.
	Settle      time.Duration
	DrainSettle time.Duration

	// Limits of the checks.
	// RecoverWithin: lag back to 0 at most this long after the dependency
	// returns (and after the spike ends).
	RecoverWithin time.Duration
	// HealthyP99: the p99 end-to-end latency (produce to acknowledgement)
	// of healthy keys' records while the poison record is retried.
	HealthyP99 time.Duration
	// PausedSlack: records the source may lose to a tier while the
	// dependency fails, after OpenWithin (probes, deliveries in flight).
	PausedSlack int
	OpenWithin  time.Duration
	// The retry budget (Finagle's defaults: 20% of deliveries plus 10
	// retries/s, over a window): retries within any Window ≤
	// BudgetRatio × deliveries + BudgetPerSecond × Window.
	BudgetRatio     float64
	BudgetPerSecond float64
	BudgetWindow    time.Duration
	// MaxSpread: peak ÷ mean of the synchronised failure's retry arrivals
	// per 100 ms.
	MaxSpread float64
}

// capacity is the dependency's capacity in records/s.
func (p *Plan) capacity() float64 { return float64(p.AppWorkers) / p.ServiceTime.Seconds() }

// Quick is the plan of `kretry gameday --quick`: about a minute for both
// peers on the embedded broker.
func Quick() Plan {
	return Plan{
		Name: "quick", Partitions: 4, Keys: 200,
		AppWorkers: 8, ServiceTime: 10 * time.Millisecond, SlowServiceTime: 60 * time.Millisecond,
		MaxInFlight: 8, AppTimeout: time.Second,
		Tiers: []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second}, Jitter: 0.2,
		SteadyRate: 150, SteadyFor: 3 * time.Second, SpikeRate: 2000, SpikeFor: time.Second,
		SlowFor: 2 * time.Second, FailFor: 4 * time.Second, Burst: 300, BlipFor: 500 * time.Millisecond, Settle: 8 * time.Second, DrainSettle: 20 * time.Second,
		RecoverWithin: 15 * time.Second, HealthyP99: 250 * time.Millisecond,
		PausedSlack: 16, OpenWithin: time.Second,
		BudgetRatio: 0.2, BudgetPerSecond: 10, BudgetWindow: 2 * time.Second, MaxSpread: 2,
	}
}

// Full is the default plan: longer phases and an outage of 20s, several
// times the tier chain.
func Full() Plan {
	p := Quick()
	p.Name = "full"
	p.Tiers = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	p.SteadyFor, p.SpikeFor = 10*time.Second, 3*time.Second
	p.SlowFor, p.FailFor = 5*time.Second, 20*time.Second
	p.Burst, p.BlipFor, p.Settle, p.DrainSettle = 500, time.Second, 40*time.Second, 60*time.Second
	p.RecoverWithin = 30 * time.Second
	p.BudgetWindow = 10 * time.Second
	return p
}

// chain is the longest time a record can spend in the tiers.
func (p *Plan) chain() time.Duration {
	var d time.Duration
	for _, t := range p.Tiers {
		d += t + time.Duration(p.Jitter*float64(t))
	}
	return d
}
