package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
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

// cpuSampler samples the CPU time of this process, of the broker and of
// an external peer (the Spring peers' JVM; 0 for the others) every 5ms,
// so that the CPU of a window can be read afterwards at any two instants
// (linear interpolation between samples). This process's CPU leaves out
// the sampler's own: reading a broker's /proc/<pid>/stat every 5ms cost
// about 90ms of CPU a second (pprof), which counted as the in-process
// peer's, 0.5-0.9µs per record of a healthy run.
type cpuSampler struct {
	mu   sync.Mutex
	t    []int64
	self []time.Duration
	brk  []time.Duration
	peer []time.Duration
	stop chan struct{}
	done chan struct{}
}

func startSampler(brk, peer func() time.Duration) *cpuSampler {
	s := &cpuSampler{stop: make(chan struct{}), done: make(chan struct{})}
	sample := func() {
		t, c, b, p := time.Now().UnixNano(), processCPU(), brk(), peer()
		c -= threadCPU() // the sampler's thread (LockOSThread below)
		s.mu.Lock()
		s.t, s.self, s.brk, s.peer = append(s.t, t), append(s.self, c), append(s.brk, b), append(s.peer, p)
		s.mu.Unlock()
	}
	first := make(chan struct{})
	go func() {
		defer close(s.done)
		// The sampler runs on a thread of its own, so that its CPU can be
		// read (RUSAGE_THREAD) and left out of this process's.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		sample()
		close(first)
		tk := time.NewTicker(5 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-tk.C:
				sample()
			case <-s.stop:
				sample()
				return
			}
		}
	}()
	<-first
	return s
}

func (s *cpuSampler) close() { close(s.stop); <-s.done }

// at returns the CPU times (this process, broker) at Unix ns t.
func (s *cpuSampler) at(t int64) (self, brk time.Duration) {
	return s.interp(t, s.self), s.interp(t, s.brk)
}

// peerAt returns the external peer's CPU time at Unix ns t.
func (s *cpuSampler) peerAt(t int64) time.Duration { return s.interp(t, s.peer) }

func (s *cpuSampler) interp(t int64, v []time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearch(s.t, t)
	switch {
	case i == 0:
		return v[0]
	case i >= len(s.t):
		return v[len(s.t)-1]
	}
	f := float64(t-s.t[i-1]) / float64(s.t[i]-s.t[i-1])
	return v[i-1] + time.Duration(f*float64(v[i]-v[i-1]))
}

// processCPU is this process's user + system CPU time (getrusage).
// threadCPU is the calling thread's CPU time so far (user + system;
// getrusage RUSAGE_THREAD, Linux), 0 when it cannot be read.
func threadCPU() time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD, getrusage(2)
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// producer writes the plan's records to the source topic.
type producer struct {
	cl    *kgo.Client
	topic string
	p     *plan
	a     *app
	err   atomic.Pointer[error] // the first failed produce
}

func newProducer(addrs []string, topic string, p *plan, a *app) (*producer, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(1<<20),
	)
	if err != nil {
		return nil, err
	}
	return &producer{cl: cl, topic: topic, p: p, a: a}, nil
}

func (pr *producer) record(i int) *kgo.Record {
	k := pr.p.keys[i]
	now := time.Now()
	pr.a.produced[i].Store(now.UnixNano())
	return &kgo.Record{
		Topic:     pr.topic,
		Partition: k % partitions,
		Key:       fmt.Appendf(nil, "k%04d", k),
		Value:     encode(i, now),
	}
}

func (pr *producer) produce(ctx context.Context, i int) {
	pr.cl.Produce(ctx, pr.record(i), func(_ *kgo.Record, err error) {
		if err != nil {
			pr.err.CompareAndSwap(nil, &err)
		}
	})
}

// flush waits for every produced record and returns the first error.
func (pr *producer) flush(ctx context.Context) error {
	if err := pr.cl.Flush(ctx); err != nil {
		return err
	}
	if err := pr.err.Load(); err != nil {
		return *err
	}
	return nil
}

// backlog writes records [0, backlog) and waits until they are acknowledged.
func (pr *producer) backlog(ctx context.Context) error {
	for i := range pr.p.backlog {
		pr.produce(ctx, i)
	}
	return pr.flush(ctx)
}

// paced writes records [backlog, backlog+paced) at rate records/s.
func (pr *producer) pace(ctx context.Context, rate float64) error {
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for j := range pr.p.paced {
		if d := time.Until(start.Add(time.Duration(j) * interval)); d > 0 {
			time.Sleep(d)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pr.produce(ctx, pr.p.backlog+j)
	}
	return pr.flush(ctx)
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
