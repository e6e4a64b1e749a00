package config

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/pkg/flow"
)

// EngineOptions translates topic t of a loaded (defaulted and validated)
// config c into engine.Options, the one translation `kretry run` uses: the
// plan (t.Plan, as the lag monitor reads it), the group, the transactional id
// (flow.TransactionalID(kafka.transactional_id, kafka.instance_id, group)),
// the instance id, the classify lists, app.max_in_flight, app.timeout,
// kafka.fetch_max_wait, ordering, the parking topic, on_dead_letter,
// parking.max_records and the group's session timeout with a heartbeat
// every second (at most a third of the session timeout, Kafka's guidance,
// instead of franz-go's 3s, so the others learn of a leaving instance's
// rebalance within a second).
//
// It lives here rather than in package engine so that a Go program that
// embeds the engine without a config file does not link koanf. The caller
// adds what a config cannot say: Brokers, ClientOpts, the
// Deliverer, CreateSource, the Observer and the Logger.
func (c *Config) EngineOptions(t *Topic) engine.Options {
	instance := c.Kafka.InstanceIDOrHost()
	statuses := t.Statuses()
	o := engine.Options{
		Plan:            t.Plan(),
		Group:           t.Group,
		TransactionalID: flow.TransactionalID(c.Kafka.TransactionalID, instance, t.Group),
		InstanceID:      instance,
		Statuses:        &statuses,
		MaxInFlight:     c.App.MaxInFlight,
		DeliveryTimeout: c.App.Timeout,
		FetchMaxWait:    c.Kafka.FetchMaxWait,
		Ordering:        t.Ordering,
		OnDeadLetter:    t.OnDeadLetter,
		MaxParked:       t.Parking.MaxRecords,
	}
	if t.Ordering.Parks() {
		o.ParkingTopic = t.Parking.Topic
	}
	if s := c.Kafka.SessionTimeout; s > 0 {
		o.GroupOpts = []kgo.Opt{kgo.SessionTimeout(s), kgo.HeartbeatInterval(min(time.Second, s/3))}
	}
	return o
}
