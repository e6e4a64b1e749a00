// Package dlq is the operator's side of a kretry dead-letter topic (DLQ):
// what is waiting in it (Read, Stats), and the two ways out, redrive (back
// into kretry's pipeline, so the app sees the record again) and discard
// (handled without delivery, kept for audit). docs/DLQ.md is the long form.
//
// Marks. Beside each DLQ D lives its marks topic, D + ".marks"
// (MarksTopic): one partition, compacted, created on first use. A mark says
// what became of one DLQ record: its key is "<partition>/<offset>" of the
// DLQ record, its value a JSON Mark (action redriven or discarded, the
// operation's id, who, when, why). A DLQ record is waiting while it has no
// mark. A mark applies only to the DLQ record with the same ce-id and
// timestamp, so a DLQ deleted and created again does not inherit marks.
//
// Exactly once. A redrive writes each record's copy onto the source's first
// retry tier and its mark in one Kafka transaction (KIP-98), many records
// per transaction; a discard writes only marks, transactionally too. The
// transactional id is one per DLQ (TransactionalID), so a new operation
// fences (and aborts the open transaction of) an older one that was killed,
// and it reads the marks only after that (read_committed): whatever the
// older one committed is seen, whatever it did not is gone. Killed with
// kill -9 halfway and run again, every selected record is moved once.
//
// One at a time. An operation first takes the DLQ's lease: a record keyed
// "lease" on the marks topic, renewed every quarter of its TTL
// (DefaultLeaseTTL, or WithLeaseTTL) while it runs and released at its
// end. A second operation that finds a live lease is
// refused with BusyError naming the holder; a lease not renewed for
// that TTL belonged to a process that died, and is taken over. Two that
// claim at once are ordered by the log: the later claim is refused. The
// fencing above keeps a wrong judgement (a holder paused longer than
// the TTL) from moving anything twice: the older one's next commit fails.
//
// Where a redriven record goes: onto the first retry tier, due at once,
// with kretry-attempt 0 and the redrive headers (retrytopics.Redrive). The
// engine delivers it with its original ce-id, key, value and headers plus
// kretry-redrive-count and kretry-redrive-id, its attempts start afresh, it
// never blocks or parks its key, and a permanent failure returns it to the
// DLQ once, redrive count kept (pkg/engine/redrive.go).
package dlq
