// Package parking defines the parking topic's changelog: the records that
// keep per-key order (DESIGN.md invariants 3 and 8) across restarts,
// crashes and rebalances. The engine (pkg/engine) writes and replays them;
// `kretry parking release` writes an operator release.
//
// With ordering key, a record whose delivery fails transiently becomes its
// key's head in the retry tiers, and later records of the key are parked:
// moved to the parking topic, on the same partition, instead of being
// delivered. Partition p of the parking topic holds two kinds of record:
//
//   - parked records: a source record of a blocked key, byte for byte,
//     behind the kretry header run (kretry-stage is the parking topic);
//
//   - op records, whose first header is HeaderOp, keyed by the lane key (the
//     record key; empty for ordering partition), with no value.
//
// The ops:
//
//   - block: the record whose ce-id is in HeaderRef went to a tier; the key
//     is blocked while it is there.
//   - release: that record left the tiers; HeaderRef is "<verdict> <ce-id>"
//     (ReleaseRef), verdict "ok" (delivered) or the on_dead_letter policy
//     under which it was dead-lettered. A release whose ce-id is not a
//     current head of the key (a tier record delivered again after a crash)
//     changes nothing.
//   - settle: the parked record at the offset in HeaderRef was delivered,
//     moved on or dead-lettered.
//   - unblock: the key has no record in the tiers and none parked.
//   - barrier: written by a new owner of the partition, with a nonce of its
//     own in HeaderRef.
//
// Ops are written in the same Kafka transaction as the move or offset
// commit they describe, with one exception that keeps a key's ops in the
// order a replay needs: when a key's next head fails before the transaction
// carrying the key's unblock has been written, the unblock moves to the
// head's entry, just ahead of its block. (Moves are written queue by queue,
// so otherwise the unblock could land after the new block and a replay
// would release the parked records ahead of the head: seen on Kafka,
// TestUnblockPrecedesTheKeysNextBlock.) On assignment the new owner writes a barrier,
// replays the partition from its committed offset up to that barrier (every
// block without its release blocks its key; every parked record without a
// settle is parked) and only then delivers records of the partition's
// source and tiers. The parking partition's committed offset advances past
// a key's records and ops once the key is unblocked, so the replay is
// bounded by what is still blocked.
//
// An operator releases a key held under on_dead_letter: hold with a release
// op whose HeaderOrigin is OriginOperator (OperatorRelease).
package parking
