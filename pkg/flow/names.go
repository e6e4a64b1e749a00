package flow

import (
	"strconv"
	"strings"
)

// Version is written in kretry-version on every moved record and is the
// service.version of kretry's telemetry. `kretry` sets it from its build
// information at start; "dev" otherwise.
var Version = "dev"

// Ordering is how a topic keeps the order of its records while one of them
// is retried (config key topics[].ordering).
type Ordering string

const (
	// OrderingKey parks the later records of a key while one of its records
	// is in a retry tier; other keys flow on (DESIGN.md invariant 3). The
	// default.
	OrderingKey Ordering = "key"
	// OrderingPartition blocks the whole partition behind a failing record.
	OrderingPartition Ordering = "partition"
	// OrderingNone never parks: records of a failing key may be overtaken.
	OrderingNone Ordering = "none"
)

// Orderings lists the valid Ordering values, in the order config errors
// name them.
var Orderings = []Ordering{OrderingKey, OrderingPartition, OrderingNone}

// Parks reports whether o parks records (key or partition), and so needs a
// parking topic.
func (o Ordering) Parks() bool { return o == OrderingKey || o == OrderingPartition }

// OnDeadLetter is the fate of the records parked behind a record that was
// dead-lettered (config key topics[].on_dead_letter).
type OnDeadLetter string

const (
	// OnDeadLetterRelease delivers the parked records, each carrying
	// kretry-gap-after with the dead-lettered record's ce-id. The default.
	OnDeadLetterRelease OnDeadLetter = "release"
	// OnDeadLetterDeadLetter moves the parked records to the DLQ, in order.
	OnDeadLetterDeadLetter OnDeadLetter = "dead_letter"
	// OnDeadLetterHold keeps them parked until an operator releases the key
	// (`kretry parking release`).
	OnDeadLetterHold OnDeadLetter = "hold"
)

// OnDeadLetters lists the valid OnDeadLetter values.
var OnDeadLetters = []OnDeadLetter{OnDeadLetterRelease, OnDeadLetterDeadLetter, OnDeadLetterHold}

// Stage names where a record is: the source, a retry tier ("tier-1",
// "tier-2", …, see TierStage), the parking topic or the DLQ. It is the
// kretry.stage attribute of the metrics and the Stage of the engine's
// events.
type Stage string

const (
	StageSource  Stage = "source"
	StageParking Stage = "parking"
	StageDLQ     Stage = "dlq"
)

// TierStage names tier i (1-based): "tier-1", "tier-2", ….
func TierStage(i int) Stage { return Stage("tier-" + strconv.Itoa(i)) }

// Tier returns the 1-based tier of a tier stage, and false for the other
// stages.
func (s Stage) Tier() (int, bool) {
	n, ok := strings.CutPrefix(string(s), "tier-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i > 0
}

// MoveKind is what a committed move did to a record.
type MoveKind string

const (
	// MoveRetry wrote it to a retry tier.
	MoveRetry MoveKind = "retry"
	// MovePark wrote it to the parking topic, behind its key's head.
	MovePark MoveKind = "park"
	// MoveDeadLetter wrote it to the DLQ.
	MoveDeadLetter MoveKind = "dead-letter"
)

// Outcome is the result of one delivery attempt: OutcomeOK, or the class
// of the failure ("transient", "permanent"; the delivery.Class values).
type Outcome string

const (
	OutcomeOK        Outcome = "ok"
	OutcomeTransient Outcome = "transient"
	OutcomePermanent Outcome = "permanent"
)
