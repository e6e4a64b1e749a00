package parking

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Lookup rebuilds one key's parking state from the records of its parking
// partition past the group's committed offset, as an engine restoring the
// partition replays them (pkg/engine/restore.go), for the operator's
// release (`kretry parking release`): is the key held there, or is its
// head still in a retry tier, where a release would change nothing. The
// committed offset never passes a block op of a key still blocked, so the
// records from it are enough. The zero Lookup has read nothing.
type Lookup struct {
	key Key[int64] // parked records by their offset
	// blockSeen: the key's block op was read, so the engine's release ops
	// that follow are its own (as lane.blockWritten is the engine's).
	blockSeen bool
}

// Add folds r, the key's next record of the partition in offset order: a
// parked record or an op.
func (l *Lookup) Add(r *kgo.Record) {
	op, ok := ParseOp(r)
	if !ok {
		l.key.ReadBack(r.Offset)
		return
	}
	switch op.Kind {
	case OpBlock:
		l.key.Block(op.Ref)
		l.blockSeen = true
	case OpRelease:
		if op.Origin == OriginOperator {
			l.key.OperatorRelease()
			return
		}
		verdict, id := SplitRef(op.Ref)
		if l.blockSeen && l.key.HasHead(id) && l.key.LeaveHead(id) {
			l.key.Resolve(verdict, id)
		}
	case OpSettle:
		if off, err := strconv.ParseInt(op.Ref, 10, 64); err == nil {
			l.key.RemoveParked(func(o int64) bool { return o == off })
		}
	case OpUnblock:
		l.key.Unblock()
		l.blockSeen = false
	}
}

// State is the key's state once the records added so far are replayed
// (Key.Restored): Idle, Blocked (a head in a retry tier), Releasing,
// Held or DeadLettering. An operator release changes only a Held key's
// state (Key.OperatorRelease; a Releasing one is released already).
func (l *Lookup) State() State {
	k := l.key
	k.Restored()
	return k.State()
}

// Head is the ce-id of a record of the key still in a retry tier, "" when
// none is.
func (l *Lookup) Head() string {
	if len(l.key.heads) == 0 {
		return ""
	}
	return l.key.heads[0]
}

// Parked is the number of the key's parked records not yet delivered or
// dead-lettered.
func (l *Lookup) Parked() int { return l.key.ParkedRecords() }
