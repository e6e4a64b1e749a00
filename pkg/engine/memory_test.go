package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
)

// BenchmarkParkingMemory measures the engine's live heap per blocked key
// and per parked record the way e2e/bench's memory measure does (2000 keys
// blocked by a record on a 1-minute tier, then 5 records parked behind
// each; key 6 bytes, value 100 bytes), but in-process: every allocation is
// sampled (runtime.MemProfileRate 1) and those made by the embedded broker
// are left out, so the figures are the engine's and its client's alone.
//
//	KRETRY_TEST_BROKER=embedded go test -run '^$' -bench ParkingMemory -benchtime 1x ./pkg/engine/
//
// With KRETRY_MEM_PROFILE=PREFIX it writes the heap profile at each step
// to PREFIX.0 (before), PREFIX.1 (keys blocked) and PREFIX.2 (records
// parked); read what a step added with
// `go tool pprof -sample_index=inuse_space -ignore kfake -base PREFIX.1 PREFIX.2`.
func BenchmarkParkingMemory(b *testing.B) {
	const keys, perKey, valueBytes = 2000, 5, 100
	runtime.MemProfileRate = 1
	for range b.N {
		perKeyB, perRecB := measureParking(b, keys, perKey, valueBytes)
		b.ReportMetric(perKeyB, "B/blocked-key")
		b.ReportMetric(perRecB, "B/parked-record")
		b.ReportMetric(perRecB-float64(valueBytes+len("b00000")), "B/parked-record-beyond-kv")
	}
}

func measureParking(b *testing.B, keys, perKey, valueBytes int) (perBlockedKey, perParked float64) {
	e := newEnv(b, 4, time.Minute)
	h := delivery.HandlerFunc(func(_ context.Context, m *delivery.Message) error {
		if bytes.HasPrefix(m.Value, []byte("head")) && m.Attempt == 1 {
			return delivery.Transient(fmt.Errorf("head fails"))
		}
		return nil
	})
	o := e.options(h)
	o.Ordering = flow.OrderingKey
	o.ParkingTopic = e.plan.Source + ".parking"
	o.MaxInFlight = 64
	o.FetchMaxWait = 250 * time.Millisecond
	o.CommitInterval = 0 // the default
	eng, stop := e.start(o)
	defer stop()
	st := eng.Stats()
	value := func(prefix string) []byte {
		v := make([]byte, valueBytes)
		copy(v, prefix)
		return v
	}
	produce := func(n int, key func(i int) string, v []byte) {
		rs := make([]*kgo.Record, n)
		for i := range rs {
			rs[i] = &kgo.Record{Key: []byte(key(i)), Value: v, Partition: int32(i % 4)}
		}
		e.produce(rs...)
	}
	until := func(what string, cond func() bool) {
		deadline := time.Now().Add(60 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				b.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Second) // let fetched records reach the engine
	}
	produce(2000, func(i int) string { return fmt.Sprintf("w%05d", i) }, value("warm"))
	until("warm-up deliveries", func() bool { return st.Delivered.Load() >= 2000 })
	key := func(i int) string { return fmt.Sprintf("b%05d", i) }
	h0 := engineHeap()
	heapProfile(b, 0)
	produce(keys, key, value("head"))
	until("blocked keys", func() bool {
		return st.BlockedKeys.Load() >= int64(keys) && st.Retried[0].Load() >= int64(keys)
	})
	h1 := engineHeap()
	heapProfile(b, 1)
	for range perKey {
		produce(keys, key, value("parked"))
	}
	want := int64(keys * perKey)
	until("parked records", func() bool { return st.Parked.Load() >= want && st.ParkedRecords.Load() >= want })
	h2 := engineHeap()
	heapProfile(b, 2)
	b.Logf("heap without the broker: %d → %d → %d bytes", h0, h1, h2)
	return float64(h1-h0) / float64(keys), float64(h2-h1) / float64(want)
}

// engineHeap is the live heap after two collections, without what the
// embedded broker allocated (frames of kfake or internal/broker), as the
// memory profile counts it (exact with runtime.MemProfileRate 1).
func engineHeap() int64 {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	var sum int64
	for i := range recs {
		if !brokerStack(recs[i].Stack()) {
			sum += recs[i].InUseBytes()
		}
	}
	return sum
}

// heapProfile writes the heap profile of step i (see BenchmarkParkingMemory).
func heapProfile(b *testing.B, i int) {
	prefix := os.Getenv("KRETRY_MEM_PROFILE")
	if prefix == "" {
		return
	}
	f, err := os.Create(fmt.Sprintf("%s.%d", prefix, i))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

func brokerStack(pcs []uintptr) bool {
	fs := runtime.CallersFrames(pcs)
	for {
		f, more := fs.Next()
		if strings.Contains(f.Function, "/kfake") || strings.Contains(f.Function, "kretry/internal/broker") {
			return true
		}
		if !more {
			return false
		}
	}
}

// collected registers a cleanup on p and returns a function that reports
// whether p was collected, after collections.
func collected[T any](p *T) func() bool {
	done := make(chan struct{})
	runtime.AddCleanup(p, func(ch chan struct{}) { close(ch) }, done)
	return func() bool {
		for range 20 {
			runtime.GC()
			select {
			case <-done:
				return true
			case <-time.After(10 * time.Millisecond): // the cleanup goroutine runs it
			}
		}
		return false
	}
}

// TestWaitingRecordsLetGoOfWhatIsDone blocks a key (its head on the
// tier) and parks a record behind it in a broker-free engine, then checks
// that what is done or copied is collectable while the key stays blocked:
// the head's source entry (with its move record) once its transaction
// committed, and the fetched kgo.Records of the tier record and the parked
// record, whose batch, headers and franz-go record an entry must not pin.
func TestWaitingRecordsLetGoOfWhatIsDone(t *testing.T) {
	s := newSim(t, flow.OnDeadLetterRelease)
	var fetched []func() bool
	s.fetched = func(r *kgo.Record) {
		if r.Topic != s.c.plan.Source && r.Headers != nil && r.Headers[0].Key != HeaderParkingOp {
			fetched = append(fetched, collected(r))
		}
	}
	s.read(&kgo.Record{Topic: s.c.plan.Source, Key: []byte("a"), Value: []byte("head")})
	l := s.sh.lanes["a"]
	head := collected(l.wait[0])
	s.deliverNext(l, e503)
	s.read(&kgo.Record{Topic: s.c.plan.Source, Key: []byte("a"), Value: []byte("parked")})
	s.commit() // the head to the tier, its block op, the parked record
	s.commit()
	if got := s.sh.parkedCount(); got != 1 || !l.blocked() || len(fetched) != 2 {
		t.Fatalf("want key a blocked with 1 parked record and 2 records read back from the tier and parking; got parked %d, blocked %v, read back %d",
			got, l.blocked(), len(fetched))
	}
	if !head() {
		t.Error("the head's source entry is still reachable after its move committed")
	}
	for i, gone := range fetched {
		if !gone() {
			t.Errorf("fetched record %d (tier record, parked record) is still reachable: an entry pins it", i)
		}
	}
	if got := string(s.sh.park.entries[len(s.sh.park.entries)-1].rec.Value); got != "parked" {
		t.Fatalf("the parked entry holds value %q, want %q", got, "parked")
	}
	runtime.KeepAlive(s)
}
