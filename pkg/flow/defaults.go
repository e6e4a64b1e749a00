package flow

import (
	"fmt"
	"os"
	"strconv"
	"time"
	"unicode/utf8"
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

// DefaultInstanceID is kafka.instance_id when absent, and
// engine.Options.InstanceID when empty: the host's name, made a valid
// instance id by SanitizeInstanceID.
func DefaultInstanceID() string {
	host, _ := os.Hostname()
	return SanitizeInstanceID(host)
}

// SanitizeInstanceID maps s to a valid instance id: characters outside
// [a-zA-Z0-9._-] become '-', the result is cut to MaxInstanceIDLen, and an
// empty result is "localhost".
func SanitizeInstanceID(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !InstanceIDChar(c) {
			b[i] = '-'
		}
	}
	if len(b) > MaxInstanceIDLen {
		b = b[:MaxInstanceIDLen]
	}
	if len(b) == 0 {
		return "localhost"
	}
	return string(b)
}

// MaxInstanceIDLen bounds an instance id: Kafka allows 249 characters in a
// group.instance.id and a transactional id; kretry's transactional ids add
// the prefix and the group to it.
const MaxInstanceIDLen = 200

// CheckInstanceID reports why Kafka would refuse id as a
// group.instance.id (its characters, its length), or nil. The error reads
// after the name of what holds id: `"pod 3" holds " ": use letters, …`.
func CheckInstanceID(id string) error {
	for _, r := range id { // a rune, so that the error names "ü", not "\xc3"
		if r >= utf8.RuneSelf || !InstanceIDChar(byte(r)) {
			return fmt.Errorf("%q holds %q: use letters, digits, '.', '_' and '-' only (Kafka's rule for group.instance.id)", id, string(r))
		}
	}
	if len(id) > MaxInstanceIDLen {
		return fmt.Errorf("is %d characters long: at most %d", len(id), MaxInstanceIDLen)
	}
	return nil
}

// InstanceIDChar reports whether c may appear in an instance id: Kafka's
// rule for group.instance.id, letters, digits, '.', '_' and '-'.
func InstanceIDChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// RecordID is the ce-id of a record: <topic>/<partition>/<offset> of the
// ORIGINAL record, stable across retries, the app's idempotency key
// (DESIGN.md, "HTTP contract").
func RecordID(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10) + "/" + strconv.FormatInt(offset, 10)
}
