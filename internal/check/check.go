// Package check holds the conservation checker that tests and `kretry demo`
// use to prove DESIGN.md invariant 1: after a run drains, every produced
// record was acknowledged by the application or sits in the DLQ, exactly
// once. Records are identified by their CloudEvents id,
// "<topic>/<partition>/<offset>" of the original record.
package check

import (
	"sort"
	"sync"
)

// Ledger counts what happened to each record. It is safe for concurrent
// use.
type Ledger struct {
	mu       sync.Mutex
	produced map[string]struct{}
	acked    map[string]int
	dlq      map[string]int
}

// NewLedger returns an empty Ledger.
func NewLedger() *Ledger {
	return &Ledger{produced: map[string]struct{}{}, acked: map[string]int{}, dlq: map[string]int{}}
}

// Produced records that id was written to the source topic.
func (l *Ledger) Produced(id string) { l.mu.Lock(); l.produced[id] = struct{}{}; l.mu.Unlock() }

// Acked records that the application acknowledged id (2xx or nil error).
func (l *Ledger) Acked(id string) { l.mu.Lock(); l.acked[id]++; l.mu.Unlock() }

// DeadLettered records that id was read from the DLQ (committed).
func (l *Ledger) DeadLettered(id string) { l.mu.Lock(); l.dlq[id]++; l.mu.Unlock() }

// Conservation is the verdict of a Ledger (counts of records).
type Conservation struct {
	Produced int `json:"produced"`
	// Delivered counts distinct produced records the app acknowledged.
	Delivered int `json:"delivered"`
	// DeadLettered counts distinct produced records in the DLQ.
	DeadLettered int `json:"dead_lettered"`
	// Lost counts produced records neither acknowledged nor dead-lettered.
	Lost int `json:"lost"`
	// Redelivered counts acknowledgements beyond the first of a record
	// (allowed: delivery is at least once, ce-id is the idempotency key).
	Redelivered int `json:"redelivered"`
	// DLQDuplicates counts DLQ copies beyond the first of a record (must
	// be 0: moves are exactly once).
	DLQDuplicates int `json:"dlq_duplicates"`
	// Both counts records acknowledged AND dead-lettered (must be 0).
	Both int `json:"acked_and_dead_lettered"`
	// Unknown counts acknowledged or dead-lettered ids never produced.
	Unknown int `json:"unknown"`
	// LostIDs lists up to 20 lost ids, sorted.
	LostIDs []string `json:"lost_ids,omitempty"`
}

// OK reports whether nothing was lost or duplicated in the DLQ, and the
// counts add up: produced = delivered + dead_lettered.
func (c Conservation) OK() bool {
	return c.Lost == 0 && c.DLQDuplicates == 0 && c.Both == 0 && c.Unknown == 0 &&
		c.Produced == c.Delivered+c.DeadLettered
}

// Check computes the verdict now.
func (l *Ledger) Check() Conservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := Conservation{Produced: len(l.produced)}
	for id := range l.produced {
		a, d := l.acked[id], l.dlq[id]
		switch {
		case a > 0 && d > 0:
			c.Both++
		case a > 0:
			c.Delivered++
		case d > 0:
			c.DeadLettered++
		default:
			c.Lost++
			c.LostIDs = append(c.LostIDs, id)
		}
		c.Redelivered += max(a-1, 0)
		c.DLQDuplicates += max(d-1, 0)
	}
	for id := range l.acked {
		if _, ok := l.produced[id]; !ok {
			c.Unknown++
		}
	}
	for id := range l.dlq {
		if _, ok := l.produced[id]; !ok {
			c.Unknown++
		}
	}
	sort.Strings(c.LostIDs)
	if len(c.LostIDs) > 20 {
		c.LostIDs = c.LostIDs[:20]
	}
	return c
}

// Settled reports whether every produced record is acknowledged or
// dead-lettered (the run has drained).
func (l *Ledger) Settled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.produced {
		if l.acked[id] == 0 && l.dlq[id] == 0 {
			return false
		}
	}
	return true
}

// ProducedIDs returns the produced ids, sorted.
func (l *Ledger) ProducedIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.produced))
	for id := range l.produced {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
