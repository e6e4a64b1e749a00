package engine

import (
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/check"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// workload is a keyed stream of records and the answer the app gives each.
type workload struct {
	recs []*kgo.Record
	// transient fail their first delivery; permanent always fail (422);
	// exhausted always fail transiently (503), through every tier.
	transient, permanent, exhausted map[string]bool
	// byPartition checks order per partition (ordering partition), not
	// per key.
	byPartition bool
}

// newWorkload builds n records over keys spread on partitions (key i lives
// on partition i % partitions); pTransient, pPermanent and pExhausted are
// percentages of records failing transiently once, permanently and
// transiently for ever.
func newWorkload(n, keys int, partitions int32, pTransient, pPermanent, pExhausted int) *workload {
	w := &workload{transient: map[string]bool{}, permanent: map[string]bool{}, exhausted: map[string]bool{}}
	for i := range n {
		k := i * 7 % keys
		v := fmt.Sprintf("v%d", i)
		r := rec(fmt.Sprintf("key-%d", k), v)
		r.Partition = int32(k) % partitions
		w.recs = append(w.recs, r)
		switch h := (i*7919 + 13) % 100; {
		case h < pPermanent:
			w.permanent[v] = true
		case h < pPermanent+pTransient:
			w.transient[v] = true
		case h < pPermanent+pTransient+pExhausted:
			w.exhausted[v] = true
		}
	}
	return w
}

func (w *workload) answer(m *delivery.Message) error {
	v := string(m.Value)
	switch {
	case w.permanent[v]:
		return e422
	case w.exhausted[v]:
		return e503
	case w.transient[v] && m.Attempt == 1:
		return e503
	}
	return nil
}

// verify checks conservation (every record acknowledged or in the DLQ,
// exactly once there, never both) and order per key, after the run drained.
func (w *workload) verify(t *testing.T, e *env) {
	t.Helper()
	ledger, order := check.NewLedger(), check.NewOrder()
	recs := slices.Clone(w.recs)
	slices.SortStableFunc(recs, func(a, b *kgo.Record) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	for _, r := range recs {
		rid := id(e.plan.Source, r.Partition, r.Offset)
		ledger.Produced(rid)
		if w.byPartition {
			order.Produced(strconv.Itoa(int(r.Partition)), rid)
		} else {
			order.Produced(string(r.Key), rid)
		}
	}
	e.app.mu.Lock()
	for _, c := range e.app.calls {
		if c.ok {
			ledger.Acked(c.msg.ID)
			order.Acked(c.msg.ID)
		}
	}
	e.app.mu.Unlock()
	last := map[string]int64{} // key → original offset of its latest DLQ record
	for _, d := range e.readAll(e.plan.DLQ) {
		tp, _ := header(d, retrytopics.HeaderOriginalTopic)
		p, _ := header(d, retrytopics.HeaderOriginalPartition)
		o, _ := header(d, retrytopics.HeaderOriginalOffset)
		ledger.DeadLettered(tp + "/" + p + "/" + o)
		off, _ := strconv.ParseInt(o, 10, 64)
		if l, ok := last[string(d.Key)]; ok && off <= l {
			t.Errorf("DLQ out of order for key %s: offset %d after %d", d.Key, off, l)
		}
		last[string(d.Key)] = off
	}
	if c := ledger.Check(); !c.OK() {
		t.Errorf("conservation broken: %+v", c)
	} else {
		t.Logf("conservation: %+v", c)
	}
	if n, ex := order.Violations(); n > 0 {
		t.Errorf("%d order violations: %v", n, ex)
	}
}

// dlqIDs returns the ids of the original records in the DLQ, with their
// number of copies.
func (e *env) dlqIDs() map[string]int {
	out := map[string]int{}
	for _, d := range e.readAll(e.plan.DLQ) {
		tp, _ := header(d, retrytopics.HeaderOriginalTopic)
		p, _ := header(d, retrytopics.HeaderOriginalPartition)
		o, _ := header(d, retrytopics.HeaderOriginalOffset)
		out[tp+"/"+p+"/"+o]++
	}
	return out
}

// settled reports whether every record of w was acknowledged or sits in the
// DLQ.
func (w *workload) settled(e *env) bool {
	var missing []string
	e.app.mu.Lock()
	for _, r := range w.recs {
		if rid := id(e.plan.Source, r.Partition, r.Offset); e.app.acked[rid] == 0 {
			missing = append(missing, rid)
		}
	}
	e.app.mu.Unlock()
	if len(missing) == 0 {
		return true
	}
	if len(missing) > len(w.recs)/2 {
		return false // not worth reading the DLQ yet
	}
	dlq := e.dlqIDs()
	for _, rid := range missing {
		if dlq[rid] == 0 {
			return false
		}
	}
	return true
}

// waitFor polls cond every 20ms for up to d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drained waits until every record of w is acknowledged or dead-lettered
// and nothing is parked past the committed offsets.
func (w *workload) drained(t *testing.T, e *env, d time.Duration) {
	t.Helper()
	waitFor(t, "every record acknowledged or dead-lettered", d, func() bool { return w.settled(e) })
	waitFor(t, "nothing parked past the committed offsets", d, func() bool {
		return len(e.parkedAfterCommit(e.group(), retrytopics.ParkingTopic(e.plan.Source))) == 0
	})
}

// switchWriter forwards to w until off: a killed engine's goroutines may
// outlive its test, and must not write to the test's output then.
type switchWriter struct {
	mu  sync.Mutex
	w   io.Writer
	off bool
}

func (s *switchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.off {
		return len(b), nil
	}
	return s.w.Write(b)
}

// startKillable runs an engine whose network can be cut. stop stops it
// cleanly (and fails the test if Run does not return within 20s); kill cuts
// its network and cancels it without waiting: a killed process is not
// waited for. (A severed engine's Run can take up to the 60s of commit's
// context to return: its final Flush retries the moves for as long as
// that, whatever ShutdownGrace says.)
func (e *env) startKillable(o Options) (eng *Engine, stop, kill func()) {
	e.t.Helper()
	d := &severableDialer{}
	// A killed instance's open transaction holds back read_committed reads
	// (and, with RequireStableFetchOffsets, offset fetches) of what it
	// wrote until the broker aborts it: after TransactionTimeout (franz-go's
	// default 40s) unless a successor with the same transactional id aborts
	// it first. Instances that are killed and replaced by an instance with
	// another id (here "a"; in production a pod replaced by one with another
	// hostname) would stall the run for 40s.
	o.ClientOpts = append(slices.Clone(o.ClientOpts), kgo.Dialer(d.dial), kgo.RetryTimeout(2*time.Second), kgo.TransactionTimeout(5*time.Second))
	out := &switchWriter{w: e.t.Output()}
	o.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: testLogLevel}))
	eng, stop, cancel, once := e.launch(o)
	kill = func() {
		once.Do(func() {
			d.sever()
			out.mu.Lock()
			out.off = true
			out.mu.Unlock()
			cancel()
		})
	}
	e.t.Cleanup(stop)
	return eng, stop, kill
}
