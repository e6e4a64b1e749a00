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
	b, err := s.broker(partitions)
	if err != nil {
		return nil, err
	}
	defer b.close()
	topic := b.topic
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if _, err := createTopics(ctx, cl, partitions, append([]string{topic}, kretryStageTopics(topic, []time.Duration{time.Minute})...)...); err != nil {
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
	eng, stop, err := runEngine(ctx, kretryOptions(e, h))
	if err != nil {
		return nil, err
	}
	defer stop()

	value := func(prefix string) []byte {
		v := make([]byte, valueBytes)
		copy(v, prefix)
		return v
	}
	produce := func(n int, key func(i int) string, v []byte) error {
		rs := make([]*kgo.Record, n)
		for i := range rs {
			rs[i] = &kgo.Record{Topic: topic, Key: []byte(key(i)), Value: v}
		}
		return cl.ProduceSync(ctx, rs...).FirstErr()
	}
	until := func(what string, cond func() bool) error {
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
	st := eng.Stats()
	// Warm up: the group is joined and the client's buffers are in use.
	if err := produce(2000, func(i int) string { return fmt.Sprintf("w%05d", i) }, value("warm")); err != nil {
		return nil, err
	}
	if err := until("warm-up deliveries", func() bool { return st.Delivered.Load() >= 2000 }); err != nil {
		return nil, err
	}
	r := &memResult{keys: keys, perKey: perKey, valueBytes: valueBytes, keyBytes: len("b00000")}
	r.heap0 = liveHeap()
	key := func(i int) string { return fmt.Sprintf("b%05d", i) }
	if err := produce(keys, key, value("head")); err != nil {
		return nil, err
	}
	if err := until("blocked keys", func() bool {
		return st.BlockedKeys.Load() >= int64(keys) && st.Retried[0].Load() >= int64(keys)
	}); err != nil {
		return nil, err
	}
	r.heap1 = liveHeap()
	for range perKey {
		if err := produce(keys, key, value("parked")); err != nil {
			return nil, err
		}
	}
	want := int64(keys * perKey)
	if err := until("parked records", func() bool {
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
