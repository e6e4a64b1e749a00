package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
)

// The scale scenario (-scale, issue 10): how kretry's cost grows with the
// source partitions of one instance and with the keys it holds blocked.
// For each broker kind and each case (partitions × blocked keys, the small
// case first as the reference):
//
//  1. start one kretry engine (in-process handler, ordering key, one 10m
//     tier so that a blocked key stays blocked) on a fresh source topic;
//  2. block phase (blocked > 0): one record for each of `blocked` new keys
//     fails transiently once; measured from its first delivery until every
//     one is moved to the tier (committed) and counted blocked: rec/s, CPU
//     per record, and live heap growth per blocked key;
//  3. flow phase: `records` healthy records (1,000 other keys) appear at
//     once (one producer transaction: the engine reads committed, so the
//     backlog becomes visible whole and producing costs nothing inside the
//     window); measured from the first delivery to the last: rec/s, CPU
//     per record, live heap after.
//
// The bare franz-go consumer (read committed, same handler) runs the flow
// phase of the cases without blocked keys, as the partition-count
// baseline. CPU is this process's (getrusage); the broker is not counted.
type scaleCase struct{ partitions, blocked int }

// scaleTiers: one tier, long enough that a blocked key stays blocked for
// the whole case.
var scaleTiers = []time.Duration{10 * time.Minute}

type scaleResult struct {
	c                    scaleCase
	peer                 string
	err                  error
	join                 time.Duration // engine/consumer start → first delivery
	blockRate, blockCPU  float64       // rec/s, CPU s per 100k records
	perBlockedKey        float64       // bytes
	flowRate, flowCPU    float64
	heapAfter            uint64 // bytes, live heap after the flow phase
	blockedSeen, records int64
	notes                []string
}

func runScale(ctx context.Context, cfg *config, kinds []string, bigParts, keys, records int, limit time.Duration, only string) error {
	var cases []scaleCase
	for _, c := range []scaleCase{{partitions, 0}, {bigParts, 0}, {partitions, keys}, {bigParts, keys}} {
		if only == "" || slices.Contains(strings.Split(only, ","), fmt.Sprintf("%dx%d", c.partitions, c.blocked)) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		return fmt.Errorf("-scale-cases %q: no case (want PARTITIONSxKEYS, e.g. %dx0,%dx%d)", only, bigParts, bigParts, keys)
	}
	fmt.Printf("    kretry bench -scale: %d flow records per case; blocked keys %d; partitions %d and %d\n", records, keys, partitions, bigParts)
	fmt.Printf("    machine: %s\n", machine())
	for _, kind := range kinds {
		s, err := openSite(ctx, kind, cfg.inproc)
		if err != nil {
			return err
		}
		fmt.Printf("\n#### broker: %s\n\n    %s\n    load before: %s\n\n", kind, s.describe(), loadAvg())
		var rs []*scaleResult
		for _, c := range cases {
			for _, peer := range []string{"kretry", "bare"} {
				if peer == "bare" && c.blocked > 0 {
					continue
				}
				fmt.Fprintf(os.Stderr, "%-8s scale %-6s %5d partitions, %6d blocked keys … ", kind, peer, c.partitions, c.blocked)
				r := runScaleCase(ctx, cfg, s, c, peer, records, limit)
				if r.err != nil {
					fmt.Fprintf(os.Stderr, "error: %v\n", r.err)
				} else {
					fmt.Fprintf(os.Stderr, "flow %.0f rec/s\n", r.flowRate)
				}
				rs = append(rs, r)
			}
		}
		s.close()
		reportScale(rs)
		fmt.Printf("\n    load after: %s\n", loadAvg())
	}
	return nil
}

// scaleHandler is the application of the scale scenario: a "head" record
// fails transiently on its first attempt (blocking its key), every other
// delivery is counted.
type scaleHandler struct {
	first, last atomic.Int64 // Unix ns of the first and last counted delivery
	flow        atomic.Int64
	headFirst   atomic.Int64
}

func (h *scaleHandler) handle(value []byte, attempt int) error {
	now := time.Now().UnixNano()
	if bytes.HasPrefix(value, []byte("head")) {
		h.headFirst.CompareAndSwap(0, now)
		if attempt == 1 {
			return delivery.Transient(errTransient)
		}
		return nil
	}
	h.first.CompareAndSwap(0, now)
	h.flow.Add(1)
	storeMax(&h.last, now)
	return nil
}

func runScaleCase(ctx context.Context, cfg *config, s *site, c scaleCase, peer string, records int, limit time.Duration) *scaleResult {
	r := &scaleResult{c: c, peer: peer}
	b, err := s.broker(c.partitions)
	if err != nil {
		r.err = err
		return r
	}
	defer b.close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.TransactionalID(b.topic+"-producer"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedRecords(1<<20), kgo.TransactionTimeout(2*time.Minute))
	if err != nil {
		r.err = err
		return r
	}
	defer prod.Close()
	topics := []string{b.topic}
	if peer == "kretry" && !cfg.newTopics {
		topics = append(topics, kretryStageTopics(b.topic, scaleTiers)...) // as after a first start
	}
	if _, err := createTopics(ctx, prod, c.partitions, topics...); err != nil {
		r.err = err
		return r
	}
	h := &scaleHandler{}
	heap0 := liveHeap()
	start := time.Now()
	stop, st, err := startScalePeer(ctx, cfg, b, peer, h)
	if err != nil {
		r.err = err
		return r
	}
	defer stop()
	r.err = scalePhases(ctx, r, prod, b.topic, h, st, start, records, heap0, limit)
	return r
}

// startScalePeer starts kretry (st: its Stats) or the bare consumer (st nil).
func startScalePeer(ctx context.Context, cfg *config, b *benchBroker, peer string, h *scaleHandler) (func(), *engine.Stats, error) {
	e := &env{addrs: b.addrs, topic: b.topic, group: b.topic + "-" + peer, maxInFlight: cfg.maxInFlight,
		tiers: scaleTiers, fetchWait: cfg.fetchWait, log: cfg.log, obs: &txnObserver{}}
	if peer == "bare" {
		cl, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ConsumerGroup(e.group), kgo.ConsumeTopics(e.topic),
			kgo.FetchMaxWait(e.fetchWait), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		if err != nil {
			return nil, nil, err
		}
		stop := runLoop(ctx, func(ctx context.Context) {
			for ctx.Err() == nil {
				cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) { _ = h.handle(rec.Value, 1) })
			}
		})
		return func() { stop(); cl.Close() }, nil, nil
	}
	hf := delivery.HandlerFunc(func(_ context.Context, m *delivery.Message) error { return h.handle(m.Value, m.Attempt) })
	eng, stop, err := runEngine(ctx, kretryOptions(e, hf))
	if err != nil {
		return nil, nil, err
	}
	return stop, eng.Stats(), nil
}

// scalePhases runs the block phase (kretry with blocked keys) and the flow
// phase, filling r.
func scalePhases(ctx context.Context, r *scaleResult, prod *kgo.Client, topic string, h *scaleHandler, st *engine.Stats,
	start time.Time, records int, heap0 uint64, limit time.Duration) error {
	ph := &scalePhase{ctx: ctx, r: r, prod: prod, topic: topic, h: h, st: st, limit: limit, parts: int32(r.c.partitions)}
	if r.c.blocked > 0 {
		if err := ph.block(start); err != nil {
			return err
		}
	}
	return ph.flow(start, records, heap0)
}

// scalePhase is what both phases of a scale case use.
type scalePhase struct {
	ctx   context.Context
	r     *scaleResult
	prod  *kgo.Client
	topic string
	h     *scaleHandler
	st    *engine.Stats
	limit time.Duration
	parts int32
}

// produce writes n records in one transaction.
func (ph *scalePhase) produce(n int, rec func(i int) *kgo.Record) error {
	if err := ph.prod.BeginTransaction(); err != nil {
		return err
	}
	for i := range n {
		ph.prod.Produce(ph.ctx, rec(i), nil)
	}
	if err := ph.prod.Flush(ph.ctx); err != nil {
		return err
	}
	return ph.prod.EndTransaction(ph.ctx, kgo.TryCommit)
}

// block produces one failing record per blocked key and waits until every
// key is blocked: r's join, block rate and CPU, and memory per blocked key.
func (ph *scalePhase) block(start time.Time) error {
	r, st, h := ph.r, ph.st, ph.h
	head := memValue("head")
	heap1 := liveHeap()
	cpu0 := processCPU()
	if err := ph.produce(r.c.blocked, func(i int) *kgo.Record {
		return &kgo.Record{Topic: ph.topic, Partition: int32(i) % ph.parts, Key: fmt.Appendf(nil, "b%06d", i), Value: head}
	}); err != nil {
		return fmt.Errorf("producing the blocking records: %w", err)
	}
	done := waitFor(ph.ctx, ph.limit, func() bool {
		return st.BlockedKeys.Load() >= int64(r.c.blocked) && st.Retried[0].Load() >= int64(r.c.blocked)
	})
	if ph.ctx.Err() != nil {
		return ph.ctx.Err()
	}
	end := time.Now().UnixNano()
	cpu1 := processCPU()
	moved := min(st.Retried[0].Load(), int64(r.c.blocked))
	if !done {
		r.notes = append(r.notes, fmt.Sprintf("block phase stopped after %v: %d of %d keys blocked", ph.limit, moved, r.c.blocked))
	}
	r.join = time.Duration(h.headFirst.Load() - start.UnixNano())
	if d := end - h.headFirst.Load(); d > 0 && moved > 0 {
		r.blockRate = float64(moved) / (float64(d) / 1e9)
		// cpu0 was read before producing; the producer's part is
		// small next to the moves but counted (PERFORMANCE.md).
		r.blockCPU = (cpu1 - cpu0).Seconds() / float64(moved) * 1e5
	}
	r.blockedSeen = st.BlockedKeys.Load()
	r.perBlockedKey = (float64(liveHeap()) - float64(heap1)) / float64(r.c.blocked)
	return nil
}

// flow produces records healthy records on numKeys keys and waits until
// they are delivered: r's flow rate and CPU, and the heap after.
func (ph *scalePhase) flow(start time.Time, records int, heap0 uint64) error {
	r, h := ph.r, ph.h
	v := memValue("flow")
	if err := ph.produce(records, func(i int) *kgo.Record {
		k := i % numKeys
		return &kgo.Record{Topic: ph.topic, Partition: int32(k) % ph.parts, Key: fmt.Appendf(nil, "h%04d", k), Value: v}
	}); err != nil {
		return fmt.Errorf("producing the flow records: %w", err)
	}
	cpu := startSampler(func() time.Duration { return 0 }, func() time.Duration { return 0 })
	defer cpu.close()
	done := waitFor(ph.ctx, ph.limit, func() bool { return h.flow.Load() >= int64(records) })
	if ph.ctx.Err() != nil {
		return ph.ctx.Err()
	}
	n := h.flow.Load()
	if !done {
		r.notes = append(r.notes, fmt.Sprintf("flow phase stopped after %v: %d of %d records", ph.limit, n, records))
	}
	first, last := h.first.Load(), h.last.Load()
	if r.c.blocked == 0 {
		r.join = time.Duration(first - start.UnixNano())
	}
	if d := last - first; d > 0 && n > 0 {
		r.flowRate = float64(n) / (float64(d) / 1e9)
		c0, _ := cpu.at(first)
		c1, _ := cpu.at(last)
		r.flowCPU = (c1 - c0).Seconds() / float64(n) * 1e5
	}
	r.records = h.flow.Load()
	h2 := liveHeap()
	r.heapAfter = h2 - min(heap0, h2)
	return nil
}

// waitFor polls cond every 10ms until it holds (true), or ctx ends or d
// passes (false).
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

func reportScale(rs []*scaleResult) {
	rows := [][]string{{"peer", "partitions", "blocked keys", "first delivery after start", "block rec/s", "block CPU s/100k",
		"bytes per blocked key", "flow rec/s", "flow CPU s/100k", "heap growth MiB", "notes"}}
	for _, r := range rs {
		if r.err != nil {
			rows = append(rows, []string{r.peer, fmt.Sprint(r.c.partitions), fmt.Sprint(r.c.blocked), "", "", "", "", "", "", "", "error: " + short(r.err)})
			continue
		}
		blk, bcpu, per := "–", "–", "–"
		if r.c.blocked > 0 {
			blk, bcpu, per = fmt.Sprintf("%.0f", r.blockRate), fmt.Sprintf("%.2f", r.blockCPU), fmt.Sprintf("%.0f", r.perBlockedKey)
		}
		rows = append(rows, []string{r.peer, fmt.Sprint(r.c.partitions), fmt.Sprint(r.c.blocked), ms(r.join), blk, bcpu, per,
			fmt.Sprintf("%.0f", r.flowRate), fmt.Sprintf("%.2f", r.flowCPU), fmt.Sprintf("%.1f", float64(r.heapAfter)/(1<<20)), strings.Join(r.notes, "; ")})
	}
	markdown(os.Stdout, rows)
}
