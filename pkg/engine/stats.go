package engine

import "sync/atomic"

// Stats are an engine's live counters (records unless said otherwise).
type Stats struct {
	// Delivered counts deliveries the application acknowledged (2xx),
	// repeated deliveries of one record included.
	Delivered atomic.Int64
	// Failed counts deliveries that failed.
	Failed atomic.Int64
	// Retried[i] counts records moved to tier i+1 (committed).
	Retried []atomic.Int64
	// Permanent and Exhausted count records moved to the DLQ by class.
	Permanent atomic.Int64
	Exhausted atomic.Int64
	// Parked counts records moved to the parking topic.
	Parked atomic.Int64
	// InFlight is the number of deliveries under way.
	InFlight atomic.Int64
	// BlockedKeys and ParkedRecords are gauges: keys blocked and records
	// parked (or on their way to parking) on this instance now.
	BlockedKeys   atomic.Int64
	ParkedRecords atomic.Int64
	// HeldKeys is a gauge: blocked keys held under on_dead_letter hold,
	// waiting for `kretry parking release`, on this instance now.
	HeldKeys atomic.Int64
	// Batches counts committed transactions; Aborted those that did not
	// commit (their records are delivered again).
	Batches atomic.Int64
	Aborted atomic.Int64
	// Revoked counts partitions revoked or lost in rebalances.
	Revoked atomic.Int64
	// Stuck counts records that could not be moved because they do not fit
	// their next topic's max.message.bytes (see the error log).
	Stuck atomic.Int64
}
