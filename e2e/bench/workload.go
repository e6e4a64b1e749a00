package main

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Record classes: what the shared application does with a record.
const (
	classOK        byte = iota // acknowledge
	classPermanent             // fail permanently on every attempt
	classTransient             // fail transiently on the first attempt, then acknowledge
	classSlow                  // sleep slowDelay, then acknowledge
)

const (
	numKeys    = 1000
	valueBytes = 100
	slowDelay  = 200 * time.Millisecond
)

// workload decides the class of every record from its key and a seeded
// random stream, so every peer sees exactly the same records.
type workload struct {
	name string
	desc string
	// failing reports whether key k is not a healthy key: its records may
	// fail or be slow. Latency figures are over the records of the other
	// keys.
	failing func(k int) bool
	// class picks the class of a record of key k.
	class func(k int, r *rand.Rand) byte
}

var workloads = []*workload{
	{
		name:    "healthy",
		desc:    "every record acknowledged at once",
		failing: func(int) bool { return false },
		class:   func(int, *rand.Rand) byte { return classOK },
	},
	{
		// 20% of the keys carry all the failures: 1/20 of their records
		// fail permanently and 5/20 fail transiently once, so 1% and 5% of
		// all records; the other 80% of the keys are the healthy keys.
		name:    "failures",
		desc:    "1% of records permanent, 5% transient once (on 20% of the keys)",
		failing: func(k int) bool { return k%5 == 4 },
		class: func(k int, r *rand.Rand) byte {
			if k%5 != 4 {
				return classOK
			}
			switch u := r.Float64(); {
			case u < 0.05:
				return classPermanent
			case u < 0.30:
				return classTransient
			}
			return classOK
		},
	},
	{
		// Key k goes to partition k % partitions: keys 0..partitions-1
		// are one slow key per partition.
		name:    "slow-key",
		desc:    "one slow key per partition, 200ms per record",
		failing: func(k int) bool { return k < partitions },
		class: func(k int, _ *rand.Rand) byte {
			if k < partitions {
				return classSlow
			}
			return classOK
		},
	},
	{
		// Issue 3's benchmark: 1% of the keys fail transiently (every
		// record of theirs fails once, then succeeds).
		name:    "1%-keys",
		desc:    "1% of keys (10) fail transiently once per record",
		failing: func(k int) bool { return k >= 100 && k < 110 },
		class: func(k int, _ *rand.Rand) byte {
			if k >= 100 && k < 110 {
				return classTransient
			}
			return classOK
		},
	},
}

// partitions of the source topic.
const partitions = 4

// plan is the records of one run: backlog records first (the throughput
// phase), then paced records (the latency phase).
type plan struct {
	w       *workload
	keys    []int32
	classes []byte
	backlog int
	paced   int
}

func newPlan(w *workload, backlog, paced int) *plan {
	p := &plan{w: w, backlog: backlog, paced: paced}
	r := rand.New(rand.NewPCG(1, 2))
	for range backlog + paced {
		k := r.IntN(numKeys)
		p.keys = append(p.keys, int32(k))
		p.classes = append(p.classes, w.class(k, r))
	}
	return p
}

func (p *plan) healthy(i int) bool { return !p.w.failing(int(p.keys[i])) }

// Value layout: record index (8 bytes), produce time in Unix ns (8), then
// padding to valueBytes.
func encode(i int, produced time.Time) []byte {
	v := make([]byte, valueBytes)
	binary.BigEndian.PutUint64(v, uint64(i))
	binary.BigEndian.PutUint64(v[8:], uint64(produced.UnixNano()))
	return v
}

func decode(v []byte) (int, bool) {
	if len(v) < 16 {
		return 0, false
	}
	return int(binary.BigEndian.Uint64(v)), true
}

// outcome is the application's answer; each peer maps it to its own form
// (nil / delivery.Permanent / HTTP 422 …).
type outcome int

const (
	ack outcome = iota
	failPermanent
	failTransient
)

// app is the application every peer delivers to, and the tracker of what
// happened to each record. Times are Unix ns.
type app struct {
	p     *plan
	delay time.Duration // first retry delay of the peer (lateness)

	produced []atomic.Int64
	calls    []atomic.Int32
	failedAt []atomic.Int64 // end of the first (failed) attempt
	settled  []atomic.Bool
	acked    []atomic.Int64

	mu      sync.Mutex
	phase   *phase
	dropped atomic.Int64
	dupes   atomic.Int64
}

// phase measures one phase: a set of records [from, to).
type phase struct {
	from, to    int
	wantAll     int
	wantHealthy int
	start       atomic.Int64 // first handler call
	doneAll     atomic.Int64
	lastAll     atomic.Int64
	doneHealthy atomic.Int64
	lastHealthy atomic.Int64
	allDone     chan struct{}
	closeOnce   sync.Once
	latencies   []time.Duration
	lateness    []time.Duration
	endWall     int64
}

func newApp(p *plan, delay time.Duration) *app {
	n := p.backlog + p.paced
	return &app{
		p: p, delay: delay,
		produced: make([]atomic.Int64, n),
		calls:    make([]atomic.Int32, n),
		failedAt: make([]atomic.Int64, n),
		settled:  make([]atomic.Bool, n),
		acked:    make([]atomic.Int64, n),
	}
}

func (a *app) begin(from, to int) *phase {
	ph := &phase{from: from, to: to, allDone: make(chan struct{})}
	for i := from; i < to; i++ {
		ph.wantAll++
		if a.p.healthy(i) {
			ph.wantHealthy++
		}
	}
	a.mu.Lock()
	a.phase = ph
	a.mu.Unlock()
	return ph
}

// handle is the application: value in, outcome out. The Spring peers run
// the same logic in Java (spring/src/.../App.java) and report each step
// through call, failed, ack and settle (spring.go).
func (a *app) handle(ctx context.Context, value []byte) outcome {
	now := time.Now().UnixNano()
	i, ok := decode(value)
	if !ok || i >= len(a.calls) {
		return failPermanent
	}
	n := a.call(i, now)
	switch a.p.classes[i] {
	case classPermanent:
		a.settle(i, now)
		return failPermanent
	case classTransient:
		if n == 1 {
			a.failedAt[i].Store(time.Now().UnixNano())
			return failTransient
		}
	case classSlow:
		t := time.NewTimer(slowDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return failTransient
		}
		now = time.Now().UnixNano()
	}
	a.ack(i, now)
	return ack
}

// call counts a handler call of record i that started at now (Unix ns)
// and returns its number (1 for the first attempt). The second call of a
// record that failed transiently gives its retry lateness.
func (a *app) call(i int, now int64) int32 {
	a.mu.Lock()
	ph := a.phase
	a.mu.Unlock()
	in := ph != nil && i >= ph.from && i < ph.to
	if in {
		ph.start.CompareAndSwap(0, now)
	}
	n := a.calls[i].Add(1)
	if n == 2 && in {
		if f := a.failedAt[i].Load(); f != 0 {
			late := time.Duration(now - f - int64(a.delay))
			a.mu.Lock()
			ph.lateness = append(ph.lateness, late)
			a.mu.Unlock()
		}
	}
	return n
}

// ack records the application's acknowledgement of record i at now; a
// second one counts as a repeated delivery.
func (a *app) ack(i int, now int64) {
	if a.acked[i].CompareAndSwap(0, now) {
		a.settle(i, now)
	} else {
		a.dupes.Add(1)
	}
}

// drop settles a record a peer gave up on (the bare loops do not retry).
func (a *app) drop(value []byte) {
	if i, ok := decode(value); ok && i < len(a.calls) {
		if a.acked[i].Load() == 0 {
			a.dropped.Add(1)
		}
		a.settle(i, time.Now().UnixNano())
	}
}

// settle marks record i done at now (Unix ns): acknowledged, dead-lettered
// as permanent, or dropped.
func (a *app) settle(i int, now int64) {
	if a.settled[i].Swap(true) {
		return
	}
	a.mu.Lock()
	ph := a.phase
	a.mu.Unlock()
	if ph == nil || i < ph.from || i >= ph.to {
		return
	}
	t := now
	if a.p.healthy(i) {
		if p := a.produced[i].Load(); p != 0 && a.acked[i].Load() != 0 {
			a.mu.Lock()
			ph.latencies = append(ph.latencies, time.Duration(a.acked[i].Load()-p))
			a.mu.Unlock()
		}
		ph.doneHealthy.Add(1)
		storeMax(&ph.lastHealthy, t)
	}
	storeMax(&ph.lastAll, t)
	if int(ph.doneAll.Add(1)) == ph.wantAll {
		ph.closeOnce.Do(func() {
			ph.endWall = time.Now().UnixNano()
			close(ph.allDone)
		})
	}
}

func storeMax(v *atomic.Int64, t int64) {
	for {
		old := v.Load()
		if t <= old || v.CompareAndSwap(old, t) {
			return
		}
	}
}

// wait blocks until every record of the phase settled or the deadline
// passed; it reports whether all settled.
func (ph *phase) wait(d time.Duration) bool {
	select {
	case <-ph.allDone:
		return true
	case <-time.After(d):
		ph.closeOnce.Do(func() { ph.endWall = time.Now().UnixNano() })
		return false
	}
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	idx := int(q*float64(len(s))+0.5) - 1
	return s[min(max(idx, 0), len(s)-1)]
}
