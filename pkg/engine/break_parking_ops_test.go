package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// recordsAfterCommit returns every record (ops included) of topic past
// group's committed offsets.
func (e *env) recordsAfterCommit(group, topic string) []*kgo.Record {
	e.t.Helper()
	offs, err := e.adm.FetchOffsets(context.Background(), group)
	if err != nil {
		e.t.Fatal(err)
	}
	start := map[int32]kgo.Offset{}
	for p := range e.partitions(topic) {
		start[p] = kgo.NewOffset().AtStart()
		if o, ok := offs.Lookup(topic, p); ok && o.At >= 0 {
			start[p] = kgo.NewOffset().At(o.At)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		if n == 0 {
			return out
		}
	}
}

func describeOps(rs []*kgo.Record) string {
	var s []string
	for _, r := range rs {
		op, ref, _, isOp := opOf(r)
		if !isOp {
			op = "parked"
		}
		s = append(s, fmt.Sprintf("%d:%s(key %q ref %q)", r.Offset, op, r.Key, ref))
	}
	return strings.Join(s, " ")
}

// Op records on the parking topic that no engine wrote, read at
// assignment: they must neither wedge a key nor keep the parking
// partition's committed offset behind them forever (the replay at each
// assignment is meant to be bounded by what is still blocked).
func TestBreakForgedParkingOps(t *testing.T) {
	op := func(key []byte, op, ref string) *kgo.Record {
		r := &kgo.Record{Key: key, Headers: []kgo.RecordHeader{{Key: HeaderParkingOp, Value: []byte(op)}}}
		if ref != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderParkingRef, Value: []byte(ref)})
		}
		return r
	}
	for _, tc := range []struct {
		name string
		rec  *kgo.Record
	}{
		{"block without key", op(nil, opBlock, "orders/0/0")},
		{"release of a key never blocked", op([]byte("R"), opRelease, "ok")},
		{"settle with a non-numeric ref", op([]byte("R"), opSettle, "abc")},
		{"unknown op", op([]byte("R"), "frobnicate", "")},
		{"unblock of a key never blocked", op([]byte("R"), opUnblock, "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1, 100*time.Millisecond)
			parking := retrytopics.ParkingTopic(e.plan.Source)
			if _, err := e.adm.CreateTopic(context.Background(), 1, 1, nil, parking); err != nil {
				t.Fatal(err)
			}
			tc.rec.Topic = parking
			e.produce(tc.rec)
			e.app.setAnswer(failing(map[string][]error{"v0": {e503}}))
			e.produce(rec("K", "v0"), rec("K", "v1"), rec("J", "w0"))
			eng, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
			eventually(t, "all acknowledged", func() bool { return e.app.numAcked() == 3 })
			if got := strings.Join(e.app.ackedValues("K"), ","); got != "v0,v1" {
				t.Errorf("K acknowledged %s, want v0,v1", got)
			}
			deadline := time.Now().Add(3 * time.Second)
			var left []*kgo.Record
			for {
				left = e.recordsAfterCommit(e.group(), parking)
				if len(left) == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Errorf("the parking partition's committed offset is stuck: %d records past it after the run drained: %s",
					len(left), describeOps(left))
			}
			if n := eng.Stats().BlockedKeys.Load(); n != 0 {
				t.Errorf("%d keys blocked after the run drained", n)
			}
		})
	}
}

// A block or release op of a key read back from the parking topic after the
// key was unblocked, while a later record of the key is being delivered,
// belongs to a block that already ended: it must settle, or the parking
// partition's committed offset stays behind it for ever (and every later
// parking record stays in memory and is replayed at each assignment).
// (Found at 44e1301: acceptParking kept it as a marker because
// l.running != nil, and nothing settled it until the key blocked again.)
//
// Repro: K's head H fails once; its retry succeeds and, just as it does, a
// new record N of K arrives and is delivered for 200ms. H's success writes
// release and unblock in one transaction (nothing was parked); the release
// op is read back while N runs. Eight keys in turn, so a lost race in one
// cycle does not hide a regression.
func TestBreakMarkerReadBackAfterUnblockSettles(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var produced sync.WaitGroup
	defer produced.Wait()
	app := &slowApp{app: e.app, delays: func(m *delivery.Message) time.Duration {
		v := string(m.Value)
		if v[0] == 'H' && m.Attempt == 2 {
			produced.Add(1)
			go func() {
				defer produced.Done()
				time.Sleep(2 * time.Millisecond)
				cl.ProduceSync(context.Background(), &kgo.Record{Topic: e.plan.Source, Key: m.Key, Value: []byte("N" + v[1:])})
			}()
		}
		if v[0] == 'N' {
			return 200 * time.Millisecond
		}
		return 0
	}}
	e.app.setAnswer(func(m *delivery.Message) error {
		if m.Value[0] == 'H' && m.Attempt == 1 {
			return e503
		}
		return nil
	})
	e.start(e.keyedOptions(app, flow.OnDeadLetterRelease))
	for i := range 8 {
		k := fmt.Sprint("K", i)
		e.produce(rec(k, fmt.Sprint("H", i)))
		eventually(t, k+"'s two records acknowledged", func() bool { return len(e.app.ackedValues(k)) == 2 })
		if got, want := strings.Join(e.app.ackedValues(k), ","), fmt.Sprintf("H%d,N%d", i, i); got != want {
			t.Errorf("%s acknowledged %s, want %s", k, got, want)
		}
	}
	parking := retrytopics.ParkingTopic(e.plan.Source)
	deadline := time.Now().Add(2 * time.Second)
	var left []*kgo.Record
	for {
		left = e.recordsAfterCommit(e.group(), parking)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Errorf("every key is unblocked and idle, yet the parking partition's committed offset is stuck behind %d records: %s", len(left), describeOps(left))
	}
}
