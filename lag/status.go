package lag

import (
	"fmt"
	"time"
)

// Status is the health of one group's consumption of one partition, judged
// over the last Window scans. The values are ordered by severity, and the
// metric kretry.consumer.status exports them as these numbers.
type Status int8

const (
	// StatusOK: caught up, progressing, waiting by design, or not enough
	// history yet to say otherwise.
	StatusOK Status = 0
	// StatusWarn: the group commits, but its lag grew over the whole
	// window: it falls behind.
	StatusWarn Status = 1
	// StatusStall: a live member holds the partition, yet the committed
	// offset stood still, with lag, for the whole window.
	StatusStall Status = 2
	// StatusStop: nobody consumes the partition (the group is empty or the
	// partition unassigned) and the committed offset stood still, with
	// lag, for the whole window.
	StatusStop Status = 3
	// StatusErr: the latest scan could not measure the partition.
	StatusErr Status = 4
)

var statusNames = [...]string{"OK", "WARN", "STALL", "STOP", "ERR"}

func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", int8(s))
}

// MarshalText writes the name ("OK", "WARN", …).
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a name written by MarshalText.
func (s *Status) UnmarshalText(b []byte) error {
	for i, n := range statusNames {
		if n == string(b) {
			*s = Status(i)
			return nil
		}
	}
	return fmt.Errorf("lag: unknown status %q", b)
}

// Sample is what one scan saw of one group's partition.
type Sample struct {
	Time time.Time
	// Committed is the group's committed offset as fetched, -1 for none:
	// not clamped to the log start, so that retention moving the log start
	// does not pass for progress.
	Committed int64
	// Lag in records (offsets) at that scan.
	Lag int64
	// Err: the scan could not measure the partition.
	Err bool
}

// Facts are what Evaluate knows of a partition beyond its samples, all
// from the latest scan.
type Facts struct {
	// Window is the number of samples the rules need (Config.Window).
	Window int
	// Wait is how long a record may wait in the topic by design (tiers,
	// parking), 0 for none.
	Wait time.Duration
	// Age of the next record to consume, when AgeKnown.
	Age      time.Duration
	AgeKnown bool
	// Assigned: a live member of the group holds the partition.
	Assigned bool
}

// Evaluate returns the status of one partition from its samples, oldest
// first, the latest last. The rules, first match wins:
//
//  1. ERR when the latest sample has an error.
//  2. OK when the latest lag is 0: caught up. An idle partition whose
//     group has nothing to consume is OK however long ago it committed
//     (Burrow reports such a partition STOP).
//  3. OK while fewer than Window samples are known: no verdict on
//     movement without a full window (after a restart, a new group or
//     partition).
//  4. OK when a sample of the window has an error: the evidence is
//     broken either way, and the latest scan measured fine.
//  5. Over the last Window samples, when the committed offset never moved
//     and every sample has lag:
//     a. OK when the topic makes records wait by design (Wait > 0) and the
//     oldest record has not waited longer than Wait plus the window's
//     span, or its age is unknown: a retry tier holds records until
//     they are due.
//     b. STALL when a live member holds the partition.
//     c. STOP otherwise.
//  6. WARN when the committed offset moved, yet the lag never fell from
//     one sample to the next and ended higher than it started, unless
//     the topic makes records wait by design and its oldest record is
//     not overdue, as in 5a: a retry tier that takes in failures faster
//     than they come due grows its lag while it commits each due one
//     (and its first commit, -1 to the offset of its first record, is a
//     move too; a newcomer saw such a tier WARN for 4 minutes, longer
//     than the alert's 2).
//  7. OK.
//
// The lag in each sample is measured against the end offset of its own
// scan, never carried over from the last commit, so the lag keeps growing
// while a consumer stands still (Burrow freezes it at the last commit).
func Evaluate(samples []Sample, f Facts) Status {
	if len(samples) == 0 {
		return StatusErr
	}
	last := samples[len(samples)-1]
	switch {
	case last.Err:
		return StatusErr
	case last.Lag == 0:
		return StatusOK
	case len(samples) < f.Window || f.Window < 2:
		return StatusOK
	}
	w := samples[len(samples)-f.Window:]
	for _, s := range w {
		if s.Err {
			// An error inside the window breaks the evidence either way.
			return StatusOK
		}
	}
	first := w[0]
	still, lagged := true, true
	for _, s := range w {
		still = still && s.Committed == first.Committed
		lagged = lagged && s.Lag > 0
	}
	span := last.Time.Sub(first.Time)
	waiting := f.Wait > 0 && (!f.AgeKnown || f.Age <= f.Wait+span) // by design, not overdue
	if still && lagged {
		switch {
		case waiting:
			return StatusOK
		case f.Assigned:
			return StatusStall
		default:
			return StatusStop
		}
	}
	if !still && !waiting && last.Lag > first.Lag {
		rising := true
		for i := 1; i < len(w); i++ {
			rising = rising && w[i].Lag >= w[i-1].Lag
		}
		if rising {
			return StatusWarn
		}
	}
	return StatusOK
}
