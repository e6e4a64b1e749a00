package retrytopics

import "time"

// Schedule is the wait of one tier partition: its records of type R in
// offset order, each with its due time (kretry-due-time, written when the
// record moved; DESIGN.md invariant 4). A record is handed to delivery
// once it is due and every record before it was handed out: a tier
// partition is read in order, and its delays grow with the offsets but for
// jitter and Retry-After, which Plan.Route keeps within the tier. While
// its next record is not due the partition is paused (Waiting) and the
// engine's loop sleeps until NextDue: no busy loop. The zero Schedule is
// empty; it is not safe for concurrent use.
type Schedule[R any] struct {
	waiting []scheduled[R]
}

type scheduled[R any] struct {
	r   R
	due time.Time
}

// Add appends r, due at due (zero: now), behind the records already added.
func (s *Schedule[R]) Add(r R, due time.Time) {
	s.waiting = append(s.waiting, scheduled[R]{r, due})
}

// TakeDue removes and returns, in order, the records due at now, up to the
// first that is not.
func (s *Schedule[R]) TakeDue(now time.Time) []R {
	n := 0
	for n < len(s.waiting) && !s.waiting[n].due.After(now) {
		n++
	}
	if n == 0 {
		return nil
	}
	out := make([]R, n)
	for i := range n {
		out[i] = s.waiting[i].r
	}
	clear(s.waiting[:n]) // drop the references for the collector
	s.waiting = s.waiting[n:]
	return out
}

// NextDue is the due time of the next record, false when none waits.
func (s *Schedule[R]) NextDue() (time.Time, bool) {
	if len(s.waiting) == 0 {
		return time.Time{}, false
	}
	return s.waiting[0].due, true
}

// Waiting reports whether the partition waits at now: its next record is
// not due yet.
func (s *Schedule[R]) Waiting(now time.Time) bool {
	d, ok := s.NextDue()
	return ok && d.After(now)
}

// Len is the number of records waiting.
func (s *Schedule[R]) Len() int { return len(s.waiting) }
