package engine

import (
	"time"

	"github.com/kretry/kretry/pkg/flow"
)

// Observer receives the engine's events, for metrics. Every method is called
// from the engine's goroutines and must be fast and safe for concurrent
// use. A nil Observer in Options observes nothing.
type Observer interface {
	// Delivered is called after each delivery attempt.
	Delivered(DeliveryEvent)
	// Moved is called for each record whose move to a tier, the parking
	// topic or the DLQ was committed.
	Moved(MoveEvent)
	// Committed is called after each transaction ends: committed or not,
	// with the number of records whose offsets it covered.
	Committed(CommitEvent)
}

// DeliveryEvent describes one delivery attempt.
type DeliveryEvent struct {
	Group string
	// Topic and Partition are where the record was consumed from (the
	// source, a tier or the parking topic).
	Topic     string
	Partition int32
	// Source is the original source topic.
	Source string
	// Stage is flow.StageSource, a tier (flow.TierStage) or
	// flow.StageParking.
	Stage flow.Stage
	// Outcome is flow.OutcomeOK, OutcomeTransient or OutcomePermanent.
	Outcome flow.Outcome
	// Status is the HTTP status, 0 for none.
	Status int
	// ErrorType is "" on success, else a low-cardinality kind: the HTTP
	// status as text ("503"), "timeout", "connection" or "other".
	ErrorType string
	Duration  time.Duration
	Attempt   int
}

// MoveEvent describes one committed move.
type MoveEvent struct {
	Group  string
	Source string
	// From is the topic the record left; To the topic it was written to.
	From string
	To   string
	// Kind is flow.MoveRetry, MovePark or MoveDeadLetter.
	Kind flow.MoveKind
	// Class is the kretry-error-class ("transient", "permanent",
	// "exhausted"), "" for parking.
	Class string
	// Stage is a tier (flow.TierStage) for a retry, flow.StageParking or
	// flow.StageDLQ.
	Stage flow.Stage
}

// CommitEvent describes one ended transaction.
type CommitEvent struct {
	Group     string
	Source    string
	Committed bool
	Records   int
	Duration  time.Duration
}
