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

// TestEarlyCommitWaitsForACommittablePrefix: a transaction is due before
// CommitInterval once a partition's settled prefix reaches MaxPending/2,
// not once that many records settled anywhere. Partition 0's head is held
// by the app while its 40 later records and partition 1's 10 settle. The
// old rule (32 settled, over all partitions) fired while the head was
// held, prepared a transaction with little or nothing to commit, and
// started counting again; after the release nothing was due until
// CommitInterval (here an hour; on a Kafka backlog, half its transactions
// committed under 50 records, at ~15-40ms each: issue 10). The first
// transaction must come at the release and carry all 51.
func TestEarlyCommitWaitsForACommittablePrefix(t *testing.T) {
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
	o.MaxPending = 64 // due at a prefix of 32
	o.CommitInterval = time.Hour
	o.DeliveryTimeout = time.Minute
	obs := &commits{ch: make(chan struct{}, 1)}
	o.Observer = obs
	e.start(o)
	<-heldCh
	eventually(t, "the 50 records after the held one acknowledged", func() bool { return e.app.numAcked() == 50 })
	close(release)
	select {
	case <-obs.ch:
	case <-time.After(30 * time.Second):
		obs.mu.Lock()
		defer obs.mu.Unlock()
		t.Fatalf("no transaction within 30s of the release (CommitInterval is an hour: the early commit did not come); transactions before: %v", obs.recs)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.recs[0] != 51 {
		t.Errorf("the first transaction committed past %d records, want 51 (all of them, once partition 0's head settled); all: %v", obs.recs[0], obs.recs)
	}
}
