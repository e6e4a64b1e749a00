package config

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/pkg/flow"
)

// EngineOptions translates topic t of a loaded (defaulted and validated)
// config c into engine.Options, the one translation `kretry run` uses: the
// plan (t.Plan, as the lag monitor reads it), the group, the transactional id
// (flow.TransactionalID(kafka.transactional_id, kafka.instance_id, group)),
// the instance id, the classify lists, app.max_in_flight, app.timeout,
// kafka.fetch_max_wait, ordering, the parking topic, on_dead_letter,
// parking.max_records, max_age, on_expired and the group's session timeout with a heartbeat
// every second (at most a third of the session timeout, Kafka's guidance,
// instead of franz-go's 3s, so the others learn of a leaving instance's
// rebalance within a second).
//
// It lives here rather than in package engine so that a Go program that
// embeds the engine without a config file does not link koanf. The caller
// adds what a config cannot say: Brokers, ClientOpts, the
// Deliverer, CreateSource, the Observer, the Logger and the Overload gate
// (OverloadGate builds it from the same config, as `kretry run` does).
func (c *Config) EngineOptions(t *Topic) engine.Options {
	instance := c.Kafka.InstanceIDOrHost()
	statuses := t.Statuses()
	o := engine.Options{
		Plan:            t.Plan(),
		Group:           t.Group,
		TransactionalID: flow.TransactionalID(c.Kafka.TransactionalID, instance, t.Group),
		InstanceID:      instance,
		Statuses:        &statuses,
		MaxInFlight:     c.App.MaxInFlight.Ceiling(),
		DeliveryTimeout: c.App.Timeout,
		FetchMaxWait:    c.Kafka.FetchMaxWait,
		Ordering:        t.Ordering,
		OnDeadLetter:    t.OnDeadLetter,
		MaxParked:       t.Parking.MaxRecords,
		MaxAge:          t.MaxAge,
		OnExpired:       t.OnExpired,
	}
	if t.Ordering.Parks() {
		o.ParkingTopic = t.Parking.Topic
	}
	if s := c.Kafka.SessionTimeout; s > 0 {
		o.GroupOpts = []kgo.Opt{kgo.SessionTimeout(s), kgo.HeartbeatInterval(min(time.Second, s/3))}
	}
	return o
}

// OverloadGate builds the overload gate of topic t of a loaded config c,
// for engine.Options.Overload: the topic's breaker, guard and retry budget,
// app.max_rate and app.max_in_flight (auto: adaptive), as `kretry run`
// builds it (docs/OVERLOAD.md). Each engine needs its own gate. log gets
// the breaker's and the guard's state changes.
func (c *Config) OverloadGate(t *Topic, log *slog.Logger) *overload.Gate {
	b, g, r := &t.Breaker, &t.Guard, &t.Retry.Budget
	floor := DefaultBudgetMinPerSecond
	if r.MinPerSecond != nil {
		floor = *r.MinPerSecond
	}
	return overload.New(overload.Config{
		Breaker: overload.BreakerConfig{Enabled: b.On(), Window: b.Window, FailureRatio: b.FailureRatio,
			Wait: b.Wait, MaxWait: b.MaxWait, Probes: b.Probes},
		Guard:           overload.GuardConfig{Enabled: g.On(), MaxDeadLetters: g.MaxDeadLetters, Window: g.Window, Share: g.Share},
		Budget:          overload.BudgetConfig{Ratio: r.Ratio, MinPerSecond: floor, Window: r.Window},
		MaxInFlight:     c.App.MaxInFlight.Ceiling(),
		Adaptive:        c.App.MaxInFlight.Auto(),
		InitialInFlight: AutoInitialInFlight,
		MaxRate:         c.App.MaxRate,
		Logger:          log.With("topic", t.Name, "group", t.Group, "component", "overload"),
	})
}
