package parking

import (
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/flow"
)

// TestLookup: a key's state read back from its parking partition, as an
// engine's restore replays it: held after its head was dead-lettered under
// hold, blocked while the head is in a tier, releasing once an operator
// released it or the head was delivered, idle after unblock.
func TestLookup(t *testing.T) {
	const topic, head = "orders.parking", "orders/1/7"
	key := []byte("acct-1")
	off := int64(0)
	at := func(r *kgo.Record) *kgo.Record { r.Offset = off; off++; return r }
	op := func(kind, ref string) *kgo.Record { return at(OpRecord(topic, 1, key, kind, ref)) }
	parked := func() *kgo.Record { return at(&kgo.Record{Topic: topic, Partition: 1, Key: key, Value: []byte("v")}) }
	for _, tc := range []struct {
		name   string
		recs   func() []*kgo.Record
		state  State
		head   string
		parked int
	}{
		{"head in a tier", func() []*kgo.Record {
			return []*kgo.Record{op(OpBlock, head), parked(), parked()}
		}, Blocked, head, 2},
		{"held", func() []*kgo.Record {
			return []*kgo.Record{op(OpBlock, head), parked(), parked(), op(OpRelease, ReleaseRef(string(flow.OnDeadLetterHold), head))}
		}, Held, "", 2},
		{"released by an operator", func() []*kgo.Record {
			return []*kgo.Record{op(OpBlock, head), parked(), op(OpRelease, ReleaseRef(string(flow.OnDeadLetterHold), head)), at(OperatorRelease(topic, 1, key))}
		}, Releasing, "", 1},
		{"head delivered", func() []*kgo.Record {
			return []*kgo.Record{op(OpBlock, head), parked(), op(OpRelease, ReleaseRef(VerdictOK, head))}
		}, Releasing, "", 1},
		{"dead-lettering", func() []*kgo.Record {
			return []*kgo.Record{op(OpBlock, head), parked(), op(OpRelease, ReleaseRef(string(flow.OnDeadLetterDeadLetter), head))}
		}, DeadLettering, "", 1},
		{"a release of another head is not the key's", func() []*kgo.Record {
			return []*kgo.Record{op(OpBlock, head), op(OpRelease, ReleaseRef(string(flow.OnDeadLetterHold), "orders/1/99"))}
		}, Blocked, head, 0},
		{"settled and unblocked", func() []*kgo.Record {
			p := parked()
			return []*kgo.Record{op(OpBlock, head), p, op(OpRelease, ReleaseRef(VerdictOK, head)), op(OpSettle, strconv.FormatInt(p.Offset, 10)), op(OpUnblock, "")}
		}, Idle, "", 0},
	} {
		var l Lookup
		for _, r := range tc.recs() {
			l.Add(r)
		}
		if l.State() != tc.state || l.Head() != tc.head || l.Parked() != tc.parked {
			t.Errorf("%s: state %s, head %q, parked %d; want %s, %q, %d", tc.name, l.State(), l.Head(), l.Parked(), tc.state, tc.head, tc.parked)
		}
	}
}
