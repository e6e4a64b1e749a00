package parking

import (
	"slices"
	"testing"

	"github.com/kretry/kretry/pkg/flow"
)

// step is one event fed to a Key in a table test.
type step struct {
	do   func(k *Key[int])
	want State
}

func block(id string) func(*Key[int]) { return func(k *Key[int]) { k.Block(id) } }
func leave(id, verdict string) func(*Key[int]) {
	return func(k *Key[int]) {
		if k.LeaveHead(id) {
			k.Resolve(verdict, id)
		}
	}
}
func park(k *Key[int])               { k.Park() }
func readBack(r int) func(*Key[int]) { return func(k *Key[int]) { k.ReadBack(r) } }
func release(t *testing.T, want int, gap string) func(*Key[int]) {
	return func(k *Key[int]) {
		r, g, ok := k.NextRelease()
		if !ok || r != want || g != gap {
			t.Errorf("NextRelease = %d, %q, %v; want %d, %q", r, g, ok, want, gap)
		}
	}
}
func done(k *Key[int]) { k.ReleaseDone() }

// TestKeyStates walks a key through the parking state machine, as the
// engine drives it live.
func TestKeyStates(t *testing.T) {
	hold, dl := string(flow.OnDeadLetterHold), string(flow.OnDeadLetterDeadLetter)
	release1 := string(flow.OnDeadLetterRelease)
	for _, tt := range []struct {
		name  string
		steps []step
	}{
		{"head delivered: parked records released in order", []step{
			{block("o/0/1"), Blocked},
			{park, Blocked},
			{park, Blocked},
			{readBack(2), Blocked},
			{readBack(3), Blocked},
			{leave("o/0/1", VerdictOK), Releasing},
			{release(t, 2, ""), Releasing},
			{release(t, 3, ""), Releasing},
			{done, Idle},
		}},
		{"head dead-lettered, release: records follow a gap", []step{
			{block("o/0/1"), Blocked},
			{park, Blocked},
			{readBack(2), Blocked},
			{leave("o/0/1", release1), Releasing},
			{release(t, 2, "o/0/1"), Releasing},
			{done, Idle},
		}},
		{"head dead-lettered, hold: waits for the operator", []step{
			{block("o/0/1"), Blocked},
			{park, Blocked},
			{readBack(2), Blocked},
			{leave("o/0/1", hold), Held},
			{func(k *Key[int]) {
				if _, _, ok := k.NextRelease(); ok {
					t.Error("a held key released a record")
				}
			}, Held},
			{func(k *Key[int]) {
				if !k.OperatorRelease() {
					t.Error("OperatorRelease of a held key = false")
				}
			}, Releasing},
			{release(t, 2, ""), Releasing},
			{done, Idle},
		}},
		{"head dead-lettered, dead_letter: parked records to the DLQ", []step{
			{block("o/0/1"), Blocked},
			{park, Blocked},
			{park, Blocked},
			{readBack(2), Blocked},
			{leave("o/0/1", dl), DeadLettering},
			{func(k *Key[int]) {
				if got := k.TakeForDLQ(); !slices.Equal(got, []int{2}) {
					t.Errorf("TakeForDLQ = %v, want [2]", got)
				}
			}, DeadLettering}, // one parking move still on its way
			{readBack(3), DeadLettering},
			{func(k *Key[int]) {
				if got := k.TakeForDLQ(); !slices.Equal(got, []int{3}) {
					t.Errorf("TakeForDLQ = %v, want [3]", got)
				}
			}, Idle},
		}},
		{"two heads: released only after both leave", []step{
			{block("o/0/1"), Blocked},
			{block("o/0/5"), Blocked},
			{leave("o/0/1", VerdictOK), Blocked},
			{leave("o/0/5", VerdictOK), Releasing},
			{done, Idle},
		}},
		{"a released record fails again: a new head stops the release", []step{
			{block("o/0/1"), Blocked},
			{park, Blocked},
			{park, Blocked},
			{readBack(2), Blocked},
			{readBack(3), Blocked},
			{leave("o/0/1", VerdictOK), Releasing},
			{release(t, 2, ""), Releasing},
			{block("o/0/2"), Blocked},
			{func(k *Key[int]) {
				if _, _, ok := k.NextRelease(); ok {
					t.Error("released a record while a head is in the tiers")
				}
			}, Blocked},
			{leave("o/0/2", VerdictOK), Releasing},
			{release(t, 3, ""), Releasing},
			{done, Idle},
		}},
		{"spill: records behind a slow delivery, no head", []step{
			{park, Blocked},
			{func(k *Key[int]) { k.Spill() }, Releasing},
			{done, Releasing}, // the parking move is not read back yet
			{readBack(2), Releasing},
			{release(t, 2, ""), Releasing},
			{done, Idle},
		}},
		{"operator release of an idle key changes nothing", []step{
			{func(k *Key[int]) {
				if k.OperatorRelease() {
					t.Error("OperatorRelease of an idle key = true")
				}
			}, Idle},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var k Key[int]
			for i, s := range tt.steps {
				s.do(&k)
				if got := k.State(); got != s.want {
					t.Fatalf("step %d: state %v, want %v", i, got, s.want)
				}
			}
		})
	}
}

// TestKeyReplay: a changelog replayed into a Key restores it as it was.
func TestKeyReplay(t *testing.T) {
	var k Key[int]
	k.Block("o/0/1")
	k.ReadBack(2) // parked records read while replaying are no pending moves
	k.ReadBack(3)
	k.ReadBack(4)
	if _, ok := k.RemoveParked(func(r int) bool { return r == 3 }); !ok { // op settle
		t.Fatal("RemoveParked found no record 3")
	}
	if k.Parked() != 2 || k.State() != Blocked {
		t.Fatalf("parked %d, state %v; want 2, blocked", k.Parked(), k.State())
	}
	k.Restored()
	if k.State() != Blocked {
		t.Fatalf("restored with a head in the tiers: %v, want blocked", k.State())
	}
	if k.LeaveHead("o/0/1") {
		k.Resolve(VerdictOK, "o/0/1")
	}
	if r, _, ok := k.NextRelease(); !ok || r != 2 {
		t.Fatalf("first release %d, %v; want 2", r, ok)
	}

	var spilled Key[int]
	spilled.ReadBack(7) // parked with no block: a spill before the crash
	spilled.Restored()
	if spilled.State() != Releasing {
		t.Fatalf("spilled key restored as %v, want releasing", spilled.State())
	}

	var cleared Key[int]
	cleared.Block("o/0/1")
	cleared.Resolve(string(flow.OnDeadLetterHold), "o/0/1")
	cleared.Unblock()
	if cleared.State() != Idle || cleared.Gap() != "" {
		t.Fatalf("after unblock: %v gap %q, want idle", cleared.State(), cleared.Gap())
	}
}
