package engine

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/testlog"
	"github.com/kretry/kretry/parking"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// keyedOptions are options with ordering key and the env's parking topic.
func (e *env) keyedOptions(d delivery.Deliverer, policy flow.OnDeadLetter) Options {
	o := e.options(d)
	o.Ordering = flow.OrderingKey
	o.ParkingTopic = retrytopics.ParkingTopic(e.plan.Source)
	o.OnDeadLetter = policy
	o.CommitInterval = 20 * time.Millisecond
	return o
}

// values returns the values the app acknowledged (2xx) for key, in order,
// first acknowledgements only.
func (r *recorder) ackedValues(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	seen := map[string]bool{}
	for _, c := range r.calls {
		if string(c.msg.Key) == key && c.ok && !seen[c.msg.ID] {
			seen[c.msg.ID] = true
			out = append(out, string(c.msg.Value))
		}
	}
	return out
}

// firstAck returns when the app first acknowledged value v.
func (r *recorder) firstAck(v string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if string(c.msg.Value) == v && c.ok {
			return c.at
		}
	}
	return time.Time{}
}

// failing answers per value: a list of errors, one per attempt; attempts
// past the list succeed.
func failing(plan map[string][]error) func(*delivery.Message) error {
	return func(m *delivery.Message) error {
		errs := plan[string(m.Value)]
		if m.Attempt <= len(errs) {
			return errs[m.Attempt-1]
		}
		return nil
	}
}

var (
	e503 = &delivery.StatusError{Status: 503}
	e422 = &delivery.StatusError{Status: 422}
)

func TestParkingKeepsKeyOrderAndOtherKeysFlow(t *testing.T) {
	e := newEnv(t, 1, 500*time.Millisecond)
	e.app.setAnswer(failing(map[string][]error{"v0": {e503}}))
	e.produce(rec("K", "v0"), rec("K", "v1"), rec("K", "v2"), rec("J", "w0"))
	eng, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
	eventually(t, "K's records acknowledged", func() bool { return len(e.app.ackedValues("K")) == 3 })
	if got := strings.Join(e.app.ackedValues("K"), ","); got != "v0,v1,v2" {
		t.Errorf("K acknowledged %s, want v0,v1,v2", got)
	}
	if w, v := e.app.firstAck("w0"), e.app.firstAck("v0"); w.IsZero() || !w.Before(v) {
		t.Errorf("w0 acknowledged at %v, not before K's retry at %v: J waited for K", w, v)
	}
	for _, v := range []string{"v1", "v2"} {
		if n := len(e.app.callsForValue(v)); n != 1 {
			t.Errorf("%s delivered %d times, want once (parked, not delivered before release)", v, n)
		}
	}
	if n := eng.Stats().Parked.Load(); n != 2 {
		t.Errorf("%d records parked, want 2", n)
	}
	eventually(t, "nothing blocked or parked", func() bool {
		return eng.Stats().BlockedKeys.Load() == 0 && eng.Stats().ParkedRecords.Load() == 0
	})
}

func TestParkedRecordFailingAfterReleaseBecomesNewHead(t *testing.T) {
	e := newEnv(t, 1, 300*time.Millisecond)
	e.app.setAnswer(failing(map[string][]error{"v0": {e503}, "v1": {e503}}))
	e.produce(rec("K", "v0"), rec("K", "v1"), rec("K", "v2"), rec("J", "w0"))
	e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
	eventually(t, "K's records acknowledged", func() bool { return len(e.app.ackedValues("K")) == 3 })
	if got := strings.Join(e.app.ackedValues("K"), ","); got != "v0,v1,v2" {
		t.Errorf("K acknowledged %s, want v0,v1,v2", got)
	}
	calls := e.app.callsForValue("v2")
	if len(calls) != 1 {
		t.Fatalf("v2 delivered %d times, want once", len(calls))
	}
	if v1 := e.app.firstAck("v1"); calls[0].at.Before(v1) {
		t.Errorf("v2 delivered at %v before v1's successful retry at %v", calls[0].at, v1)
	}
}

func TestOnDeadLetterPolicies(t *testing.T) {
	always503 := []error{e503, e503, e503}
	t.Run("release", func(t *testing.T) {
		e := newEnv(t, 1, 100*time.Millisecond)
		e.app.setAnswer(failing(map[string][]error{"v0": always503}))
		e.produce(rec("K", "v0"), rec("K", "v1"), rec("K", "v2"))
		eng, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
		eventually(t, "v1, v2 released", func() bool { return len(e.app.ackedValues("K")) == 2 })
		if got := strings.Join(e.app.ackedValues("K"), ","); got != "v1,v2" {
			t.Errorf("acknowledged %s, want v1,v2", got)
		}
		for _, v := range []string{"v1", "v2"} {
			c := e.app.callsForValue(v)
			if len(c) == 0 || c[0].msg.GapAfter != id(e.plan.Source, 0, 0) {
				t.Errorf("%s: GapAfter %q, want the dead-lettered orders/0/0", v, c[0].msg.GapAfter)
			}
		}
		eventually(t, "head in the DLQ", func() bool { return eng.Stats().Exhausted.Load() == 1 })
	})
	t.Run("dead_letter", func(t *testing.T) {
		e := newEnv(t, 1, 100*time.Millisecond)
		e.app.setAnswer(failing(map[string][]error{"v0": always503}))
		e.produce(rec("K", "v0"), rec("K", "v1"), rec("K", "v2"), rec("J", "w0"))
		eng, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterDeadLetter))
		eventually(t, "3 in the DLQ", func() bool { return eng.Stats().Exhausted.Load()+eng.Stats().Permanent.Load() == 3 })
		dlq := e.readAll(e.plan.DLQ)
		var got []string
		for _, r := range dlq {
			got = append(got, string(r.Value))
		}
		if strings.Join(got, ",") != "v0,v1,v2" {
			t.Errorf("DLQ holds %v, want v0,v1,v2 in order", got)
		}
		for _, v := range []string{"v1", "v2"} {
			if n := len(e.app.callsForValue(v)); n != 0 {
				t.Errorf("%s was delivered %d times; dead_letter must not deliver it", v, n)
			}
		}
		if e.app.firstAck("w0").IsZero() {
			t.Error("w0 was not delivered")
		}
	})
	t.Run("hold then operator release", func(t *testing.T) {
		e := newEnv(t, 1, 100*time.Millisecond)
		e.app.setAnswer(failing(map[string][]error{"v0": always503}))
		e.produce(rec("K", "v0"), rec("K", "v1"), rec("K", "v2"))
		eng, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterHold))
		eventually(t, "head dead-lettered", func() bool { return eng.Stats().Exhausted.Load() == 1 })
		e.produce(rec("K", "v3"), rec("J", "w0"))
		eventually(t, "w0 delivered", func() bool { return !e.app.firstAck("w0").IsZero() })
		time.Sleep(300 * time.Millisecond)
		if got := e.app.ackedValues("K"); len(got) != 0 {
			t.Fatalf("held key delivered %v", got)
		}
		if n := eng.Stats().Parked.Load(); n != 3 {
			t.Errorf("%d parked, want 3 (v1, v2 and v3 that came later)", n)
		}
		if n := eng.Stats().HeldKeys.Load(); n != 1 {
			t.Errorf("HeldKeys gauge %d while K is held, want 1", n)
		}
		e.produce(OperatorRelease(retrytopics.ParkingTopic(e.plan.Source), 0, []byte("K")))
		eventually(t, "released", func() bool { return len(e.app.ackedValues("K")) == 3 })
		if n := eng.Stats().HeldKeys.Load(); n != 0 {
			t.Errorf("HeldKeys gauge %d after the release, want 0", n)
		}
		if got := strings.Join(e.app.ackedValues("K"), ","); got != "v1,v2,v3" {
			t.Errorf("acknowledged %s, want v1,v2,v3", got)
		}
	})
}

func TestNullKeysNeverParkNorBlock(t *testing.T) {
	e := newEnv(t, 1, 300*time.Millisecond)
	e.app.setAnswer(failing(map[string][]error{"n0": {e503}}))
	e.produce(&kgo.Record{Value: []byte("n0")}, &kgo.Record{Value: []byte("n1")}, rec("K", "v0"))
	eng, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
	eventually(t, "all acknowledged", func() bool { return e.app.numAcked() == 3 })
	if n1, n0 := e.app.firstAck("n1"), e.app.firstAck("n0"); !n1.Before(n0) {
		t.Errorf("n1 (null key) waited for n0's retry")
	}
	if n := eng.Stats().Parked.Load(); n != 0 {
		t.Errorf("%d parked, want 0", n)
	}
}

func TestOrderingPartitionBlocksTheWholePartition(t *testing.T) {
	e := newEnv(t, 1, 300*time.Millisecond)
	e.app.setAnswer(failing(map[string][]error{"v0": {e503}}))
	e.produce(rec("K", "v0"), rec("J", "w0"), &kgo.Record{Value: []byte("n0")})
	o := e.keyedOptions(e.app, flow.OnDeadLetterRelease)
	o.Ordering = flow.OrderingPartition
	e.start(o)
	eventually(t, "all acknowledged", func() bool { return e.app.numAcked() == 3 })
	v0, w0, n0 := e.app.firstAck("v0"), e.app.firstAck("w0"), e.app.firstAck("n0")
	if !v0.Before(w0) || !w0.Before(n0) {
		t.Errorf("partition order broken: v0 %v, w0 %v, n0 %v", v0, w0, n0)
	}
}

// TestKillWhileBlockedThenRestore kills the engine (its network cut, as a
// killed process) while K is blocked with records parked, starts a
// successor and checks that order holds, nothing is lost and nothing stays
// parked.
func TestKillWhileBlockedThenRestore(t *testing.T) {
	e := newEnv(t, 1, time.Second)
	e.app.setAnswer(failing(map[string][]error{"v0": {e503}}))
	e.produce(rec("K", "v0"), rec("K", "v1"), rec("K", "v2"), rec("J", "w0"))

	d := &severableDialer{}
	oA := e.keyedOptions(e.app, flow.OnDeadLetterRelease)
	oA.ClientOpts = []kgo.Opt{kgo.Dialer(d.dial), kgo.RetryTimeout(2 * time.Second)}
	oA.GroupOpts = fastGroup
	engA, stopA := e.start(oA)
	eventually(t, "v1, v2 parked and committed", func() bool { return engA.Stats().Parked.Load() == 2 })
	d.sever()
	go stopA()

	e.produce(rec("K", "v3"))
	oB := e.keyedOptions(e.app, flow.OnDeadLetterRelease)
	oB.GroupOpts = fastGroup
	engB, _ := e.start(oB)
	eventually(t, "K drained", func() bool { return len(e.app.ackedValues("K")) == 4 })
	if got := strings.Join(e.app.ackedValues("K"), ","); got != "v0,v1,v2,v3" {
		t.Errorf("K acknowledged %s, want v0,v1,v2,v3", got)
	}
	eventually(t, "nothing blocked or parked on the successor", func() bool {
		return engB.Stats().BlockedKeys.Load() == 0 && engB.Stats().ParkedRecords.Load() == 0
	})
	// Nothing parked is left behind: past the group's committed offset, the
	// parking partition holds no parked record.
	eventually(t, "parking committed past every parked record", func() bool {
		return len(e.parkedAfterCommit(e.group(), retrytopics.ParkingTopic(e.plan.Source))) == 0
	})
}

// parkedAfterCommit returns the parked records (not ops) of topic past
// group's committed offsets.
func (e *env) parkedAfterCommit(group, topic string) []*kgo.Record {
	e.t.Helper()
	var out []*kgo.Record
	for _, r := range e.recordsAfterCommit(group, topic) {
		if _, isOp := parking.ParseOp(r); !isOp {
			out = append(out, r)
		}
	}
	return out
}

func (e *env) partitions(topic string) map[int32]bool {
	e.t.Helper()
	ds, err := e.adm.ListTopics(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]bool{}
	for p := range ds[topic].Partitions {
		out[p] = true
	}
	return out
}

// callsForValue returns the deliveries of value v.
func (r *recorder) callsForValue(v string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if string(c.msg.Value) == v {
			out = append(out, c)
		}
	}
	return out
}

// TestSlowKeySpillsToParking: a key whose deliveries take 150ms each builds
// a backlog; once one of them holds the partition's committed offset longer
// than spillAfter, its waiting records are parked, so the source's committed
// offset does not wait for the whole backlog, the key's order holds and
// other keys are not slowed.
func TestSlowKeySpillsToParking(t *testing.T) {
	e := newEnv(t, 1, time.Second)
	slow := func(m *delivery.Message) error {
		if string(m.Key) == "S" {
			time.Sleep(150 * time.Millisecond)
		}
		return nil
	}
	app := &slowRecorder{recorder: e.app, slow: slow}
	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, rec("S", fmt.Sprintf("s%02d", i)), rec(fmt.Sprintf("k%d", i%5), fmt.Sprintf("o%02d", i)))
	}
	e.produce(recs...)
	start := time.Now()
	eng, _ := e.start(e.keyedOptions(app, flow.OnDeadLetterRelease))
	eventually(t, "other keys acknowledged", func() bool {
		n := 0
		for i := range 5 {
			n += len(e.app.ackedValues(fmt.Sprintf("k%d", i)))
		}
		return n == 20
	})
	others := time.Since(start)
	if others > time.Second {
		t.Errorf("other keys took %v; the slow key (20 × 150ms = 3s) held them up", others)
	}
	// The committed source offset passes the slow key's backlog long before
	// the slow key is done.
	eventually(t, "source committed past the backlog", func() bool {
		at, ok := e.committedAt(0)
		return ok && at >= 35
	})
	if n := len(e.app.ackedValues("S")); n >= 20 {
		t.Errorf("the slow key already finished (%d acks): the check above proved nothing", n)
	}
	eventually(t, "parking committed", func() bool { return eng.Stats().Parked.Load() > 0 })
	eventually(t, "slow key done", func() bool { return len(e.app.ackedValues("S")) == 20 })
	got := e.app.ackedValues("S")
	for i, v := range got {
		if v != fmt.Sprintf("s%02d", i) {
			t.Fatalf("slow key out of order at %d: %v", i, got)
		}
	}
}

// slowRecorder runs slow before the recorder.
type slowRecorder struct {
	*recorder
	slow func(*delivery.Message) error
}

func (s *slowRecorder) Deliver(ctx context.Context, m *delivery.Message) error {
	if err := s.slow(m); err != nil {
		return err
	}
	return s.recorder.Deliver(ctx, m)
}

// TestHoldLogNamesKeyAndRelease: under on_dead_letter: hold, the line of
// a blocked key's head dead-lettered names the key and how to release it.
func TestHoldLogNamesKeyAndRelease(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	e.app.setAnswer(failing(map[string][]error{"v0": {e503, e503, e503}}))
	e.produce(rec("K", "v0"), rec("K", "v1"))
	o := e.keyedOptions(e.app, flow.OnDeadLetterHold)
	var buf testlog.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	eng, _ := e.start(o)
	eventually(t, "head dead-lettered", func() bool { return eng.Stats().Exhausted.Load() == 1 })
	eventually(t, "the line logged", func() bool { return strings.Contains(buf.String(), "head of a blocked key dead-lettered") })
	var line string
	for l := range strings.Lines(buf.String()) {
		if strings.Contains(l, "head of a blocked key dead-lettered") {
			line = l
		}
	}
	hint := "release with `kretry parking release -c CONFIG --topic " + e.plan.Source + " --key K` (CONFIG: the config file of this kretry run, or set KRETRY_CONFIG)"
	if !strings.Contains(line, " key=K ") || !strings.Contains(line, hint) {
		t.Errorf("line %q lacks key=K or the hint %q", line, hint)
	}
}
