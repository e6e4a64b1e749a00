package engine

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A process whose static member was replaced by a duplicate (same
// instance id) and that is stopped before it noticed — in `kretry run`, a
// sibling engine of another topic was fenced and took the whole process
// down, or a SIGTERM came first — must not remove the duplicate's member
// when it leaves the group: its LeaveGroup names its own member id, and a
// broker must refuse it (FENCED_INSTANCE_ID) rather than resolve the
// instance id to the newer member and remove that one.
func TestCleanStopDoesNotRemoveTheDuplicatesMember(t *testing.T) {
	e := newEnv(t, 2)
	a, b := newRecorder(), newRecorder()
	oa := e.staticOptions(a, "dup")
	// A heartbeats rarely: it is stopped before it learns that b took its
	// instance id over.
	oa.GroupOpts = []kgo.Opt{kgo.SessionTimeout(30 * time.Second), kgo.HeartbeatInterval(10 * time.Second)}
	ra := e.runEngine(oa)
	select {
	case <-ra.eng.Joined():
	case <-time.After(30 * time.Second):
		t.Fatal("a did not join within 30s")
	}
	aMember, _ := ra.eng.cl.Load().GroupMetadata()
	rb := e.runEngine(e.staticOptions(b, "dup"))
	select {
	case <-rb.eng.Joined():
	case <-time.After(30 * time.Second):
		t.Fatal("b did not join within 30s")
	}
	bMember, _ := rb.eng.cl.Load().GroupMetadata()
	if bMember == "" || bMember == aMember {
		t.Fatalf("b's member id %q, a's %q: want b to hold a member of its own", bMember, aMember)
	}
	ra.cancel()
	select {
	case <-ra.done:
	case <-time.After(30 * time.Second):
		t.Fatal("a did not stop within 30s")
	}
	gs, err := e.adm.DescribeGroups(context.Background(), e.group())
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	found := false
	for _, m := range gs[e.group()].Members {
		members = append(members, m.MemberID)
		if m.InstanceID != nil && *m.InstanceID == "dup" && m.MemberID == bMember {
			found = true
		}
	}
	if !found {
		t.Errorf("after a's clean stop the group's members are %q: b's static member %q (instance id \"dup\") was removed by a's leave", members, bMember)
	}
	if done, err := rb.stopped(); done {
		t.Errorf("b stopped: %v", err)
	}
}
