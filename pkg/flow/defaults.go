package flow

import (
	"strconv"
	"time"
)

// Defaults shared by the YAML config and engine.Options: a zero field of
// engine.Options takes the same value as the absent key.
const (
	// DefaultOrdering is topics[].ordering when absent.
	DefaultOrdering = OrderingKey
	// DefaultOnDeadLetter is topics[].on_dead_letter when absent.
	DefaultOnDeadLetter = OnDeadLetterRelease
	// DefaultMaxInFlight bounds concurrent deliveries per topic
	// (app.max_in_flight).
	DefaultMaxInFlight = 64
	// DefaultDeliveryTimeout bounds one delivery (app.timeout).
	DefaultDeliveryTimeout = 10 * time.Second
	// DefaultFetchMaxWait bounds how long a fetch waits for data
	// (kafka.fetch_max_wait).
	DefaultFetchMaxWait = 50 * time.Millisecond
	// DefaultMaxParked bounds the parked records per partition
	// (topics[].parking.max_records).
	DefaultMaxParked = 10000
	// DefaultJitter stretches each tier delay (topics[].retry.jitter).
	DefaultJitter = 0.2
	// DefaultTransactionalIDPrefix starts every transactional id
	// (kafka.transactional_id).
	DefaultTransactionalIDPrefix = "kretry"
	// DefaultGroupSuffix makes the default consumer group <topic>-kretry.
	DefaultGroupSuffix = "-kretry"
)

// DefaultTiers are the retry delays of a topic that names none: [1m, 10m,
// 1h]. A fresh slice.
func DefaultTiers() []time.Duration {
	return []time.Duration{time.Minute, 10 * time.Minute, time.Hour}
}

// DefaultPermanent are the HTTP statuses that go to the DLQ at once: 400,
// 404, 409, 410, 413, 415, 422 (DESIGN.md, "HTTP contract"). A fresh slice.
func DefaultPermanent() []int { return []int{400, 404, 409, 410, 413, 415, 422} }

// DefaultTransient are the HTTP statuses that go to the next retry tier:
// 408, 425, 429, 500, 502, 503, 504 (DESIGN.md, "HTTP contract"). A fresh
// slice.
func DefaultTransient() []int { return []int{408, 425, 429, 500, 502, 503, 504} }

// TransactionalID is the transactional id of one engine:
// <prefix>-<instance>-<group> (kafka.transactional_id, kafka.instance_id,
// topics[].group). Stable across restarts of one instance, so a restarted
// instance aborts what its predecessor left open; distinct between live
// instances, so they do not fence each other.
func TransactionalID(prefix, instance, group string) string {
	return prefix + "-" + instance + "-" + group
}

// RecordID is the ce-id of a record: <topic>/<partition>/<offset> of the
// ORIGINAL record, stable across retries, the app's idempotency key
// (DESIGN.md, "HTTP contract").
func RecordID(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10) + "/" + strconv.FormatInt(offset, 10)
}
