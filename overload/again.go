package overload

import "time"

// This file opens the breaker again when the dependency is down again
// after a dependency outage closed, before a record on its last tier is
// dead-lettered (DESIGN.md invariant 9: an outage dead-letters nothing by
// itself).
//
// Once its probes succeed, the breaker closes and the records it held are
// delivered again, the retries due meanwhile with them. Many are on their
// last tier. When the dependency went down again by then, their transient
// failures dead-lettered them as exhausted: a held record's failure
// counts for nothing (Outcome.Again), and retries count only once no
// first attempt succeeded for a whole window (breaker.observe). A breaker
// helper's gate rig put 50 of 50 held records in the DLQ with only held
// records flowing (7 December).
//
// The probes that closed it are then the only sign that the dependency
// is up, as a restarted process has none (see Outcome.Last). So after the
// close of a dependency outage, until a fresh record succeeds, a transient
// failure that would dead-letter its record opens the breaker again and
// is held. The probes do not count, fresh or not: in the engine's test
// the closing round's probes were fresh records, and 5 of 30 records were
// dead-lettered when the close counted them.
//
// Once until a fresh record succeeds with the breaker closed: a record
// that fails for reasons of its own, delivered first after every close,
// would otherwise open the breaker again at every close, and every such
// record in a backlog of retries would open it once (the next breaker
// round: 11 openings and 10.5s instead of 315ms to drain 1,000 retries
// with 1% of them poison, when this was once per episode). With steady
// fresh traffic that is at most one more opening per outage. The opening
// is weak (the failure of a record that failed before): on a quiet topic
// it closes after weakRounds lost rounds, and the records walk their
// tiers to the DLQ (closeQuiet). It is no relapse (see relapse in
// breaker.go): one record's failure says nothing of the window.

// noteFresh notes o, an outcome of a delivery admitted with t, when it is
// a fresh record's success with the breaker closed.
func (b *breaker) noteFresh(t Ticket, o Outcome) {
	if b.state == Closed && o.Class == OK && !t.retry && !o.Again {
		b.freshSinceClose, b.lastReopened = true, false
	}
}

// downAgain reports whether o, a closed-state failure, must open the
// breaker again and be held (see the file comment).
func (b *breaker) downAgain(o Outcome) bool {
	return b.cfg.Enabled && b.outage > 0 && b.reason == ReasonDependency && o.Class == Transient && o.Last &&
		!b.freshSinceClose && !b.lastReopened && !b.quiet
}

// reopenOnLast opens the breaker for the dependency on o (downAgain),
// weak and without counting a relapse, and returns Hold. g.mu is held.
func (g *Gate) reopenOnLast(now time.Time, o Outcome) Verdict {
	b := g.breaker
	relapses := b.relapses
	b.open(now, ReasonDependency, o)
	b.relapses, b.weak, b.lastReopened = relapses, true, true
	b.log.Warn("breaker open: a record on its last tier failed and no fresh record succeeded since the breaker closed; it is held, not dead-lettered",
		"id", o.ID, "seen", o.Answer, "example", o.Message, "wait", b.span.Round(time.Millisecond).String())
	return Hold
}
