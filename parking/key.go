package parking

import (
	"slices"

	"github.com/kretry/kretry/pkg/flow"
)

// State is where one key (with ordering partition: the partition) is in
// its parking life. The engine delivers a record of the key only in Idle,
// and only the next parked record in Releasing; in every other state the
// key's new source records are parked.
type State int

const (
	// Idle: no record of the key is in a tier and none is parked.
	Idle State = iota
	// Blocked: a record of the key (a head) is in a retry tier, or records
	// are parked with no release decided yet.
	Blocked
	// Releasing: the parked records are delivered one by one, in order.
	Releasing
	// Held: the head was dead-lettered under on_dead_letter hold; the
	// parked records wait for an operator (OperatorRelease).
	Held
	// DeadLettering: the head was dead-lettered under on_dead_letter
	// dead_letter; the parked records follow it to the DLQ, in order.
	DeadLettering
)

func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case Blocked:
		return "blocked"
	case Releasing:
		return "releasing"
	case Held:
		return "held"
	case DeadLettering:
		return "dead-lettering"
	}
	return "unknown"
}

// Key is the parking state of one key: its heads in the tiers, what was
// decided when the last one left (phase) and its parked records, of type R
// (the engine's record entries), in offset order. The zero Key is Idle.
// It knows nothing of Kafka: the engine feeds it what it reads and
// delivers, live or replaying the changelog, and writes the ops. A Key is
// not safe for concurrent use.
type Key[R any] struct {
	// heads are the ce-ids of the key's records in the tiers; nearly
	// always one, so a slice (a map cost ~250 bytes per blocked key).
	heads []string
	// phase is Idle, Releasing, Held or DeadLettering: the decision taken
	// when the key's last head left the tiers.
	phase State
	// gap is the ce-id of the dead-lettered head, carried by the released
	// records as kretry-gap-after ("" after a delivered head).
	gap    string
	parked []R
	// pending counts parking moves decided and not yet read back.
	pending int
	// tally, when set (CountIn), is kept equal to the sum of Parked over
	// the keys counting into it.
	tally *Tally
}

// Tally is the number of records parked or on their way to parking over
// a set of keys (the sum of their Parked), kept by the keys themselves
// as they change, so that reading it does not walk them. The zero Tally
// is empty.
type Tally struct{ parked int }

// Parked is the sum of Parked over the keys counting into t.
func (t *Tally) Parked() int { return t.parked }

// CountIn makes k count its parked records into t from now on (and adds
// those it has). A key counts into one Tally at most.
func (k *Key[R]) CountIn(t *Tally) {
	k.tally = t
	k.count(k.Parked())
}

// count adds n to k's tally: every change of len(parked) + pending goes
// through it.
func (k *Key[R]) count(n int) {
	if k.tally != nil {
		k.tally.parked += n
	}
}

// State returns the key's state.
func (k *Key[R]) State() State {
	switch {
	case len(k.heads) > 0:
		return Blocked
	case k.phase != Idle:
		return k.phase
	case len(k.parked) > 0 || k.pending > 0:
		return Blocked
	}
	return Idle
}

// Blocked reports whether the key's source records must be parked: any
// state but Idle.
func (k *Key[R]) Blocked() bool { return k.State() != Idle }

// Heads is the number of the key's records in the tiers.
func (k *Key[R]) Heads() int { return len(k.heads) }

// HasHead reports whether record id (a ce-id) is a current head.
func (k *Key[R]) HasHead(id string) bool { return slices.Contains(k.heads, id) }

// Block notes that record id went to a tier (op block): the key blocks,
// and a release under way stops until the new head leaves.
func (k *Key[R]) Block(id string) {
	if !k.HasHead(id) {
		k.heads = append(k.heads, id)
	}
	if k.phase == Releasing {
		k.phase = Idle
	}
}

// LeaveHead notes that head id left the tiers and reports whether it was
// the key's last one; Resolve then decides what comes next.
func (k *Key[R]) LeaveHead(id string) (last bool) {
	if i := slices.Index(k.heads, id); i >= 0 {
		k.heads = slices.Delete(k.heads, i, i+1)
	}
	if len(k.heads) == 0 {
		k.heads = nil // drop the backing array with the last head
	}
	return len(k.heads) == 0
}

// Resolve applies the verdict of the key's last head leaving the tiers
// (op release): VerdictOK (delivered) releases the parked records; a
// dead-lettered head id applies the policy it was dead-lettered under.
func (k *Key[R]) Resolve(verdict, id string) {
	switch verdict {
	case VerdictOK:
		k.phase, k.gap = Releasing, ""
	case string(flow.OnDeadLetterHold):
		k.phase = Held
	case string(flow.OnDeadLetterDeadLetter):
		k.phase, k.gap = DeadLettering, id
	default: // release
		k.phase, k.gap = Releasing, id
	}
}

// Spill notes that the records waiting behind a slow delivery of the key
// were parked with no head in the tiers: they are released once it ends.
func (k *Key[R]) Spill() {
	if len(k.heads) == 0 && k.phase == Idle {
		k.phase = Releasing
	}
}

// OperatorRelease applies an operator's release (OperatorRelease): a
// blocked key with no head in the tiers is released (a dead-lettering key
// goes on to the DLQ). It reports whether the key was blocked.
func (k *Key[R]) OperatorRelease() bool {
	if len(k.heads) > 0 || !k.Blocked() {
		return false
	}
	if k.phase != DeadLettering {
		k.phase = Releasing
	}
	return true
}

// Park notes a parking move decided for a record of the key; ReadBack
// takes it when the engine reads it from the parking topic.
func (k *Key[R]) Park() {
	k.pending++
	k.count(1)
}

// ReadBack adds record r, read from the parking partition, to the parked
// records. It reports whether r was one of the key's pending parking moves
// (false: written by a previous owner).
func (k *Key[R]) ReadBack(r R) (wasPending bool) {
	k.parked = append(k.parked, r)
	if k.pending > 0 {
		k.pending--
		return true
	}
	k.count(1)
	return false
}

// RemoveParked removes the first parked record that match reports (op
// settle, replaying), and reports whether there was one.
func (k *Key[R]) RemoveParked(match func(R) bool) (R, bool) {
	for i, p := range k.parked {
		if match(p) {
			k.parked = slices.Delete(k.parked, i, i+1)
			k.count(-1)
			return p, true
		}
	}
	var zero R
	return zero, false
}

// Unblock clears the key (op unblock, replaying): no head, no decision.
// Parked records read so far stay.
func (k *Key[R]) Unblock() {
	k.heads, k.phase, k.gap = nil, Idle, ""
}

// Restored ends a replay: parked records with no head in the tiers and no
// decision are being released (after a head succeeded, or after a slow
// delivery spilled).
func (k *Key[R]) Restored() {
	if len(k.parked) > 0 && len(k.heads) == 0 && k.phase == Idle {
		k.phase = Releasing
	}
}

// NextRelease takes the next parked record to deliver in Releasing, with
// the gap it carries; ok is false when there is none. The caller asks only
// while no record of the key is in delivery.
func (k *Key[R]) NextRelease() (r R, gap string, ok bool) {
	if k.phase != Releasing || len(k.heads) > 0 || len(k.parked) == 0 {
		return r, "", false
	}
	r = k.parked[0]
	var zero R
	k.parked[0] = zero // the backing array must not keep r alive
	k.parked = k.parked[1:]
	if len(k.parked) == 0 {
		k.parked = nil
	}
	k.count(-1)
	return r, k.gap, true
}

// ReleaseDone ends a release once every parked record was delivered and
// none is on its way (the caller asks only while no record of the key is
// in delivery).
func (k *Key[R]) ReleaseDone() {
	if k.phase == Releasing && len(k.parked) == 0 && k.pending == 0 {
		k.phase, k.gap = Idle, ""
	}
}

// TakeForDLQ takes every parked record of a DeadLettering key, for the
// DLQ, in order; DeadLettering ends once no parking move is on its way.
func (k *Key[R]) TakeForDLQ() []R {
	if k.phase != DeadLettering {
		return nil
	}
	ps := k.parked
	k.parked = nil
	k.count(-len(ps))
	if k.pending == 0 {
		k.phase = Idle
	}
	return ps
}

// Gap is the ce-id the released records follow (kretry-gap-after); "" for
// none.
func (k *Key[R]) Gap() string { return k.gap }

// SetGap makes the next released records follow dead-lettered record id:
// a parked record of the key was dead-lettered while releasing.
func (k *Key[R]) SetGap(id string) { k.gap = id }

// Parked is the number of records parked or on their way to parking.
func (k *Key[R]) Parked() int { return len(k.parked) + k.pending }

// ParkedRecords is the number of parked records read back.
func (k *Key[R]) ParkedRecords() int { return len(k.parked) }
