package main

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// frame encodes one Events.java frame: kind, int32 index, int64 Unix ns.
func frame(kind byte, i int, t int64) []byte {
	f := make([]byte, 13)
	f[0] = kind
	binary.BigEndian.PutUint32(f[1:5], uint32(i))
	binary.BigEndian.PutUint64(f[5:], uint64(t))
	return f
}

// TestReadEventsBooksLikeHandle feeds the frames App.java writes for an
// acknowledged, a permanent and a transient-once record, and checks that
// they are booked as app.handle books the Go peers' calls: settled,
// latency for the healthy record, lateness of the retry past its 100ms
// delay, and a repeated acknowledgement counted.
func TestReadEventsBooksLikeHandle(t *testing.T) {
	p := &plan{w: workloads[1], keys: []int32{0, 4, 9, 1}, classes: []byte{classOK, classPermanent, classTransient, classOK}, backlog: 4}
	a := newApp(p, 100*time.Millisecond)
	ph := a.begin(0, 4)
	base := time.Now().UnixNano()
	a.produced[0].Store(base - int64(3*time.Millisecond))
	var in bytes.Buffer
	for _, f := range [][]byte{
		frame('C', 0, base), frame('A', 0, base),
		frame('C', 1, base+1), frame('P', 1, base+1),
		frame('C', 2, base+2), frame('T', 2, base+5),
		frame('C', 2, base+5+int64(130*time.Millisecond)), frame('A', 2, base+5+int64(130*time.Millisecond)),
		frame('C', 3, base+9), frame('A', 3, base+9), frame('A', 3, base+10),
	} {
		in.Write(f)
	}
	if err := readEvents(&in, a); err != nil {
		t.Fatal(err)
	}
	if !ph.wait(time.Second) {
		t.Fatalf("settled %d of 4", ph.doneAll.Load())
	}
	if got := a.calls[2].Load(); got != 2 {
		t.Errorf("record 2: %d calls, want 2", got)
	}
	if len(ph.lateness) != 1 || ph.lateness[0] != 30*time.Millisecond {
		t.Errorf("lateness %v, want [30ms] (130ms after the failure, due after 100ms)", ph.lateness)
	}
	if len(ph.latencies) == 0 || ph.latencies[0] != 3*time.Millisecond {
		t.Errorf("latencies %v, want 3ms first (record 0: produced 3ms before its ack)", ph.latencies)
	}
	if got := a.dupes.Load(); got != 1 {
		t.Errorf("repeated acks %d, want 1", got)
	}
	if got := ph.start.Load(); got != base {
		t.Errorf("phase start %d, want the first call %d", got, base)
	}
}

// TestReadEventsRejectsBadFrames: an index outside the plan or an unknown
// kind ends the stream with an error naming it, not a panic.
func TestReadEventsRejectsBadFrames(t *testing.T) {
	p := &plan{w: workloads[0], keys: []int32{0}, classes: []byte{classOK}, backlog: 1}
	for name, f := range map[string][]byte{"index": frame('A', 7, 1), "kind": frame('X', 0, 1)} {
		if err := readEvents(bytes.NewReader(f), newApp(p, 0)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := readEvents(bytes.NewReader(frame('A', 0, 1)[:5]), newApp(p, 0)); err == nil {
		t.Error("truncated frame: no error")
	}
}
