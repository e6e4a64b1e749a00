// Package retrytopics owns kretry's retry tiers and dead-letter topic: the
// topic names (TierTopic, DLQTopic), the route of a failed delivery
// (Plan.Route), the due time of a retry (Delay, DueTime), the headers a moved
// record carries (ReadOrigin, Move.Record) and the creation and checking of
// the topics themselves (Ensure).
//
// A record moves source → tier 1 → … → tier N → DLQ. Every move is written
// by the engine in one Kafka transaction with the offset commit of the record
// it replaces (DESIGN.md invariant 2); this package builds the records and
// decides where they go, it does not produce them.
package retrytopics
