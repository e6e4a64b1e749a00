package main

import (
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"
)

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
