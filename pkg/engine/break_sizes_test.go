package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// A parking topic created by the operator with the source's
// max.message.bytes (README: "or create them yourself") cannot take a
// source record near that limit once the kretry header run is added. Like
// a tier or DLQ move that cannot fit, the park must be held (Stats.Stuck),
// not written: the broker would reject it, the transaction abort, and every
// transaction after it carry the same park again — the whole instance would
// stop committing and redeliver everything, for ever (found at d7fdc58).
func TestBreakRecordTooLargeToParkIsHeld(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	parking := retrytopics.ParkingTopic(e.plan.Source)
	if _, err := e.adm.CreateTopic(context.Background(), 1, 1, nil, parking); err != nil {
		t.Fatal(err)
	}
	limit := 1048588 // the broker's default max.message.bytes, the source's and the parking topic's
	e.app.setAnswer(failing(map[string][]error{"H": {e503}}))
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ProducerBatchMaxBytes(2<<20), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	big := &kgo.Record{Topic: e.plan.Source, Key: []byte("K"), Value: make([]byte, limit-300)}
	rand.NewChaCha8([32]byte{1}).Read(big.Value) // incompressible: brokers check the compressed batch
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: e.plan.Source, Key: []byte("K"), Value: []byte("H")}, big,
		&kgo.Record{Topic: e.plan.Source, Key: []byte("J"), Value: []byte("J0")}).FirstErr(); err != nil {
		t.Fatalf("the source takes the records: %v", err)
	}
	eng, _ := e.start(e.keyedOptions(e.app, flow.OnDeadLetterRelease))
	eventually(t, "J0 acknowledged", func() bool { return !e.app.firstAck("J0").IsZero() })
	// The bug aborts every transaction (ten a second). One incidental abort
	// is allowed: on Kafka a transaction begun right after another can meet
	// CONCURRENT_TRANSACTIONS while the markers of the last are written,
	// and franz-go aborts it; seen under load.
	before := eng.Stats().Aborted.Load()
	time.Sleep(time.Second)
	aborted := eng.Stats().Aborted.Load()
	if aborted > before || aborted > 1 {
		t.Errorf("%d transactions aborted (%d in the last second): the park of a record too large for the parking topic aborts every transaction", aborted, aborted-before)
	}
	if n := len(e.app.callsForValue("J0")); int64(n) > 1+aborted {
		t.Errorf("J0 delivered %d times, want 1 (plus one per aborted transaction, %d)", n, aborted)
	}
	t.Logf("big record: %d deliveries; stuck %d", len(e.app.callsFor(id(e.plan.Source, 0, 1))), eng.Stats().Stuck.Load())
}

// Bytes are sacred through parking too: a tombstone, an empty value and
// binary, duplicate headers parked behind a failing head reach the app
// (release) and the DLQ (dead_letter) unchanged.
func TestBreakBytesThroughParking(t *testing.T) {
	hs := []kgo.RecordHeader{
		{Key: "a", Value: []byte{0x00, 0xff}},
		{Key: "dup", Value: []byte("1")},
		{Key: "", Value: nil},
		{Key: "dup", Value: []byte("2")},
		{Key: HeaderParkingOp, Value: []byte(opRelease)}, // looks like an op, but is not first
	}
	for _, policy := range []flow.OnDeadLetter{flow.OnDeadLetterRelease, flow.OnDeadLetterDeadLetter} {
		t.Run(string(policy), func(t *testing.T) {
			e := newEnv(t, 1, 100*time.Millisecond)
			e.app.setAnswer(func(m *delivery.Message) error {
				if string(m.Value) == "head" {
					return e503 // always: exhausted after the tier
				}
				return nil
			})
			in := []*kgo.Record{
				rec("K", "head"),
				{Key: []byte("K"), Value: nil, Headers: hs},
				{Key: []byte("K"), Value: []byte{}, Headers: hs},
				{Key: []byte("K"), Value: []byte{0, 1, 0xfe}, Headers: hs[:1]},
			}
			e.produce(in...)
			eng, _ := e.start(e.keyedOptions(e.app, policy))
			var got []*kgo.Record
			if policy == flow.OnDeadLetterRelease {
				eventually(t, "3 released", func() bool { return e.app.numAcked() == 3 })
				for _, r := range in[1:] {
					cs := e.app.callsFor(id(e.plan.Source, 0, r.Offset))
					if len(cs) != 1 {
						t.Fatalf("offset %d: %d deliveries", r.Offset, len(cs))
					}
					got = append(got, &kgo.Record{Key: cs[0].msg.Key, Value: cs[0].msg.Value, Headers: cs[0].msg.Headers, Offset: r.Offset})
				}
			} else {
				eventually(t, "4 in the DLQ", func() bool { return eng.Stats().Exhausted.Load()+eng.Stats().Permanent.Load() == 4 })
				for _, d := range e.readAll(e.plan.DLQ)[1:] {
					o, _ := header(d, retrytopics.HeaderOriginalOffset)
					off, _ := strconv.ParseInt(o, 10, 64)
					got = append(got, &kgo.Record{Key: d.Key, Value: d.Value, Headers: d.Headers[len(retrytopics.Headers):], Offset: off})
				}
			}
			if len(got) != 3 {
				t.Fatalf("%d records out, want 3", len(got))
			}
			for i, g := range got {
				w := in[i+1]
				if g.Offset != w.Offset || string(g.Key) != string(w.Key) || (g.Value == nil) != (w.Value == nil) ||
					string(g.Value) != string(w.Value) || !sameHeaders(g.Headers, w.Headers) || !nilsKept(g.Headers, w.Headers) {
					t.Errorf("offset %d: got key %q value %v (nil %v) headers %v; want offset %d key %q value %v (nil %v) headers %v",
						g.Offset, g.Key, g.Value, g.Value == nil, g.Headers, w.Offset, w.Key, w.Value, w.Value == nil, w.Headers)
				}
			}
		})
	}
}

// nilsKept reports whether every header value of a is nil exactly where b's
// is.
func nilsKept(a, b []kgo.RecordHeader) bool {
	for i := range a {
		if (a[i].Value == nil) != (b[i].Value == nil) {
			return false
		}
	}
	return true
}

// Options.DeliveryTimeout "also bounds in-process handlers". A handler that
// ignores its context holds its in-flight slot for as long as it runs: with
// MaxInFlight such handlers hung, nothing else is ever delivered, on any
// partition. Past DeliveryTimeout (and some grace) the engine should treat
// the delivery as timed out (transient: next tier) and free its slot,
// discarding the late result.
func TestBreakHungHandlersDoNotTakeEverySlot(t *testing.T) {
	e := newEnv(t, 2, 100*time.Millisecond)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	h := delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
		if strings.HasPrefix(string(m.Value), "hang") && m.Attempt == 1 {
			<-release // ignores ctx
		}
		return e.app.Deliver(ctx, m)
	})
	o := e.options(h)
	o.MaxInFlight = 2
	o.DeliveryTimeout = 200 * time.Millisecond
	e.start(o)
	h0, h1 := rec("a", "hang-0"), rec("b", "hang-1")
	h1.Partition = 1
	e.produce(h0, h1)
	time.Sleep(100 * time.Millisecond)
	var others []*kgo.Record
	for i := range 4 {
		r := rec(fmt.Sprint("k", i), fmt.Sprint("ok-", i))
		r.Partition = int32(i % 2)
		others = append(others, r)
	}
	e.produce(others...)
	deadline := time.Now().Add(3 * time.Second)
	for e.app.numAcked() < 4 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := e.app.numAcked(); n < 4 {
		t.Errorf("%d records acknowledged 3s later, want at least the 4 others: two hung handlers (DeliveryTimeout 200ms) hold both in-flight slots", n)
	}
	once.Do(func() { close(release) })
}
