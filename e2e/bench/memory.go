package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
)

// memResult is the memory micro-measure.
type memResult struct {
	keys, perKey         int
	perBlockedKey        float64 // bytes
	perParkedRecord      float64 // bytes
	blockedKeys, parked  int64
	heap0, heap1, heap2  uint64
	valueBytes, keyBytes int
}

// liveHeap is the heap in use by live objects after two forced
// collections (runtime.MemStats.HeapAlloc right after runtime.GC).
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// measureMemory blocks `keys` keys in a kretry engine (ordering key) and
// parks perKey records behind each, reading the live heap before, after
// blocking and after parking:
//
//	per blocked key   = (heap after blocking − heap before) / keys
//	per parked record = (heap after parking − heap after blocking) / (keys × perKey)
//
// A key is blocked by a record that fails transiently on a 1-minute tier,
// so it stays blocked for the whole measure; the blocked record itself
// waits in memory on its tier partition (it is part of a blocked key's
// cost). The broker runs in the child process, so its memory is not
// counted.
func measureMemory(ctx context.Context, s *site, keys, perKey int, log *slog.Logger) (*memResult, error) {
	rig, err := startMemRig(ctx, s, log)
	if err != nil {
		return nil, err
	}
	defer rig.close()
	st := rig.eng.Stats()
	// Warm up: the group is joined and the client's buffers are in use.
	if err := rig.produce(2000, func(i int) string { return fmt.Sprintf("w%05d", i) }, memValue("warm")); err != nil {
		return nil, err
	}
	if err := memUntil("warm-up deliveries", func() bool { return st.Delivered.Load() >= 2000 }); err != nil {
		return nil, err
	}
	r := &memResult{keys: keys, perKey: perKey, valueBytes: valueBytes, keyBytes: len("b00000")}
	r.heap0 = liveHeap()
	key := func(i int) string { return fmt.Sprintf("b%05d", i) }
	if err := rig.produce(keys, key, memValue("head")); err != nil {
		return nil, err
	}
	if err := memUntil("blocked keys", func() bool {
		return st.BlockedKeys.Load() >= int64(keys) && st.Retried[0].Load() >= int64(keys)
	}); err != nil {
		return nil, err
	}
	r.heap1 = liveHeap()
	for range perKey {
		if err := rig.produce(keys, key, memValue("parked")); err != nil {
			return nil, err
		}
	}
	want := int64(keys * perKey)
	if err := memUntil("parked records", func() bool {
		return st.Parked.Load() >= want && st.ParkedRecords.Load() >= want
	}); err != nil {
		return nil, err
	}
	r.heap2 = liveHeap()
	r.blockedKeys, r.parked = st.BlockedKeys.Load(), st.ParkedRecords.Load()
	r.perBlockedKey = (float64(r.heap1) - float64(r.heap0)) / float64(keys)
	r.perParkedRecord = (float64(r.heap2) - float64(r.heap1)) / float64(want)
	return r, nil
}

// memRig is the memory measure's broker, producer and engine.
type memRig struct {
	ctx   context.Context
	topic string
	cl    *kgo.Client
	eng   *engine.Engine
	close func()
}

// startMemRig starts a broker with the source topic and a 1-minute tier,
// and an engine whose handler fails each key's "head" record once.
func startMemRig(ctx context.Context, s *site, log *slog.Logger) (*memRig, error) {
	b, err := s.broker(partitions)
	if err != nil {
		return nil, err
	}
	topic := b.topic
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ProducerLinger(0))
	if err != nil {
		b.close()
		return nil, err
	}
	h := delivery.HandlerFunc(func(_ context.Context, m *delivery.Message) error {
		if bytes.HasPrefix(m.Value, []byte("head")) && m.Attempt == 1 {
			return delivery.Transient(errTransient)
		}
		return nil
	})
	e := &env{addrs: b.addrs, topic: topic, group: topic + "-mem", maxInFlight: 64,
		tiers: []time.Duration{time.Minute}, fetchWait: 250 * time.Millisecond, log: log, obs: &txnObserver{}}
	var eng *engine.Engine
	stop := func() {}
	_, err = createTopics(ctx, cl, partitions, append([]string{topic}, kretryStageTopics(topic, []time.Duration{time.Minute})...)...)
	if err == nil {
		eng, stop, err = runEngine(ctx, kretryOptions(e, h))
	}
	if err != nil {
		cl.Close()
		b.close()
		return nil, err
	}
	return &memRig{ctx: ctx, topic: topic, cl: cl, eng: eng, close: func() { stop(); cl.Close(); b.close() }}, nil
}

// produce writes n records of value v, keyed key(i), and waits for them.
func (m *memRig) produce(n int, key func(i int) string, v []byte) error {
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: m.topic, Key: []byte(key(i)), Value: v}
	}
	return m.cl.ProduceSync(m.ctx, rs...).FirstErr()
}

// memValue is a valueBytes value that starts with prefix.
func memValue(prefix string) []byte {
	v := make([]byte, valueBytes)
	copy(v, prefix)
	return v
}

// memUntil waits up to 60s for cond, then a second more for fetched
// records to reach the engine.
func memUntil(what string, cond func() bool) error {
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("memory measure: timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // let fetched records reach the engine
	return nil
}
