package engine

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
)

// commits records the engine's transactions, for tests.
type commits struct {
	mu   sync.Mutex
	recs []int // records committed past, per committed transaction
	ch   chan struct{}
}

func (c *commits) Delivered(DeliveryEvent) {}
func (c *commits) Moved(MoveEvent)         {}
func (c *commits) Committed(ev CommitEvent) {
	if !ev.Committed || ev.Records == 0 {
		return
	}
	c.mu.Lock()
	c.recs = append(c.recs, ev.Records)
	c.mu.Unlock()
	select {
	case c.ch <- struct{}{}:
	default:
	}
}

// TestEarlyCommitTakesWhatSettled: a transaction is due before
// CommitInterval once MaxPending/2 records of a partition settled since
// the last one, wherever they stand: partition 0's head is held by the app
// while its 40 later records and partition 1's 10 settle, and the
// transaction comes while the head is still held and takes them (the
// head's offset stays committed, the records past it listed done in the
// commit's metadata; progress.go). Under the old rule, which took only a
// partition's settled prefix, nothing of partition 0 went before its head
// and 32 records of it could never make a transaction due.
func TestEarlyCommitTakesWhatSettled(t *testing.T) {
	e := newEnv(t, 2)
	recs := []*kgo.Record{rec("h", "hold")}
	for i := range 40 {
		recs = append(recs, rec("a"+strconv.Itoa(i), "p0-"+strconv.Itoa(i)))
	}
	for i := range 10 {
		r := rec("b"+strconv.Itoa(i), "p1-"+strconv.Itoa(i))
		r.Partition = 1
		recs = append(recs, r)
	}
	e.produce(recs...)
	release := make(chan struct{})
	defer close(release)
	var held sync.Once
	heldCh := make(chan struct{})
	app := delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
		if string(m.Value) == "hold" {
			held.Do(func() { close(heldCh) })
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return e.app.Deliver(ctx, m)
	})
	o := e.options(app)
	o.MaxPending = 64 // due at 32 settled
	o.CommitInterval = time.Hour
	o.DeliveryTimeout = time.Minute
	obs := &commits{ch: make(chan struct{}, 1)}
	o.Observer = obs
	e.start(o)
	<-heldCh
	select {
	case <-obs.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no transaction within 30s while 40 records of partition 0 settled behind its held head (CommitInterval is an hour: the early commit did not come)")
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.recs[0] < 32 {
		t.Errorf("the first transaction committed %d records, want at least 32 (MaxPending/2 of partition 0, behind its held head); all: %v", obs.recs[0], obs.recs)
	}
}
