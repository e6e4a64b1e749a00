package overload

import "time"

// This file opens the breaker again when the dependency is down again
// after a probed close, before a record on its last tier is dead-lettered
// (DESIGN.md invariant 9: an outage dead-letters nothing by itself).
//
// Once its probes succeed, the breaker closes and the records it held are
// delivered again, the retries due meanwhile with them. Many are on their
// last tier. When the dependency went down again by then, their transient
// failures dead-lettered them as exhausted: a held record's failure
// counts for nothing (Outcome.Again), and retries count only once no
// first attempt succeeded for a whole window (breaker.observe). A breaker
// helper's gate rig put 50 of 50 held records in the DLQ with only held
// records flowing, and 10 with a fresh 503 after each (7 December).
//
// The probes that closed the outage are then the only evidence the
// dependency is up, as a restarted process has none (see Outcome.Last).
// So until a fresh record succeeds after the close, a transient failure
// that would dead-letter its record opens the breaker again and is held.
//
// Once per episode (see relapse in breaker.go): a record that fails for
// reasons of its own, delivered before any fresh record after each close,
// would otherwise open the breaker at every close. It costs one more
// probe round instead, and its next failure counts. The opening is weak
// (the failure of a record that failed before): on a quiet topic it
// closes after weakRounds lost rounds, and the records walk their tiers to
// the DLQ (closeQuiet).

// downAgain reports whether o, a closed-state outcome of a delivery
// admitted with t, must open the breaker again and be held (see the file
// comment); it notes a fresh success.
func (b *breaker) downAgain(t Ticket, o Outcome) bool {
	if o.Class == OK && !t.retry && !o.Again {
		b.freshSinceClose = true
	}
	if !b.cfg.Enabled || b.outage == 0 || o.Class != Transient || !o.Last ||
		b.freshSinceClose || b.lastReopened || b.quiet {
		return false
	}
	b.lastReopened = true
	return true
}

// reopenOnLast opens the breaker for the dependency on o (downAgain) and
// returns Hold. g.mu is held.
func (g *Gate) reopenOnLast(now time.Time, o Outcome) Verdict {
	g.breaker.log.Warn("breaker open: a record on its last tier failed before any fresh record succeeded since the breaker closed; it is held, not dead-lettered",
		"id", o.ID, "seen", o.Answer, "example", o.Message)
	return g.openForDependency(now, o, true)
}
