package overload

import "time"

// This file closes a systemic outage (the guard's) on poison, and says
// which held records count for the guard once it closed.
//
// On a quiet topic whose records the app rejects (13 records answered 422
// in the newcomer walk-through of 7 December), the guard trips and its
// probes are mostly the held records, which fail again: a good record
// produced then won one probe of three and lost the round, round after
// round, and the topic stayed stopped until a restart. So a probe round in
// which a fresh record succeeds and only records that failed before fail
// closes the outage: the app answers what it has not seen.
//
// Closed, the held records are delivered again; failing permanently they
// count for the guard (heldRejection), although a record held before
// counts for nothing else (Outcome.Again): without
// that, every held record went to the DLQ, past max_dead_letters (a
// breaker helper's rig: 90 of 100 records answered 404 and one good
// record after the trip dead-lettered 90, against 10; DESIGN.md invariant
// 9). With it, each close lets at most MaxDeadLetters more through before
// the guard trips again, and only a fresh success closes it.

// newRound forgets what the previous probe round showed, but for a fresh
// failure since it ended.
func (b *breaker) newRound() {
	b.answered, b.freshOK, b.heldBad = 0, false, false
	b.freshBad, b.freshBadSince = b.freshBadSince, false
}

// poison takes the outcome o of a delivery made while the breaker is open
// or probing (failed: o is the outage going on; fresh: o is a first
// attempt not seen before) and closes a systemic outage when the probe
// round o belongs to, the one under way or the one just lost, is
// answered in full (every probe handed out in it answered) and shows
// poison: a fresh record was acknowledged, records that failed before
// failed, and no fresh record failed (also outside the round: one
// admitted before the opening; see noteFreshFailure). The round must be
// whole: a fresh probe still running may yet fail. A probe of an earlier
// outage counts for nothing. It returns o's verdict and true when it
// closed.
func (b *breaker) poison(now time.Time, t Ticket, o Outcome, failed, fresh bool) (Verdict, bool) {
	current := t.round == b.rounds && b.state == Probing
	lost := t.round == b.rounds-1 && b.state == Open
	if b.reason != ReasonSystemic || !t.probe || t.outage != b.outage || !current && !lost {
		return Count, false
	}
	b.answered++
	switch {
	case fresh && o.Class == OK: // acknowledged
		b.freshOK, b.freshID = true, o.ID
	case failed && !fresh:
		b.heldBad = true
	}
	if b.answered < b.out || !b.freshOK || !b.heldBad || b.freshBad {
		return Count, false
	}
	b.log.Info("breaker closed: a fresh record succeeded and only records that failed before failed again; they are delivered again and count for the guard", "reason", b.reason,
		"open_for", now.Sub(b.since).Round(time.Millisecond).String(), "held", b.held, "seen", b.answer, "fresh_id", b.freshID)
	b.closeProbed()
	if failed {
		// Delivered again once closed, where its failure counts for
		// the guard: routed now, it would reach the DLQ uncounted.
		return Probe, true
	}
	return Count, true
}

// heldRejection reports whether o is a held record's permanent failure
// (not a redriven record's). With the breaker closed it counts for the
// guard, though it counts for nothing else: the guard's outage holds the
// records it stopped, and once it closes they are delivered again; left
// out, every one of them reached the DLQ (the close on poison tried and
// reverted on 7 December). Only the held records' failures with the
// outage's answer were counted at first, and only until the next opening:
// an outage of another kind between the close and their delivery let
// every one through (a breaker helper's rig: 90 routed, want 5).
func (o Outcome) heldRejection() bool {
	return o.Again && !o.Redriven && o.Class == Permanent
}

// noteFreshFailure notes a fresh record failing (transiently, or with any
// permanent answer: see breaker.fails): the round under way, or the one
// just lost, cannot close on poison, nor, when the breaker is open between
// two rounds (a record admitted before the opening answering late, a lost
// round's probe), the next one.
func (b *breaker) noteFreshFailure() {
	b.freshBad = true
	if b.state != Probing {
		b.freshBadSince = true
	}
}
