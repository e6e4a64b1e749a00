package gameday

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// load produces the game day's records: a paced stream of keyed steady
// records at a rate that can be changed at any time (the spike), plus
// single records and bursts on demand. Every record's value carries its id
// and produce time; the ledger of produced ids is what "nothing lost" is
// checked against.
type load struct {
	// send is the client's Produce (a test's fake broker otherwise).
	send  func(context.Context, *kgo.Record, func(*kgo.Record, error))
	topic string
	keys  int

	rate atomic.Uint64 // math.Float64bits of records/s
	next atomic.Int64

	mu       sync.Mutex
	produced map[int64]order
	errs     []error
	wg       sync.WaitGroup
}

func newLoad(cl *kgo.Client, topic string, keys int) *load {
	return &load{send: cl.Produce, topic: topic, keys: keys, produced: map[int64]order{}}
}

// setRate sets the paced rate in records/s (0 stops it).
func (l *load) setRate(r float64) { l.rate.Store(math.Float64bits(r)) }

// run paces the steady records until ctx ends: every 10ms it writes the
// records due at the current rate.
func (l *load) run(ctx context.Context) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last, owed := time.Now(), 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			owed += math.Float64frombits(l.rate.Load()) * now.Sub(last).Seconds()
			last = now
			for ; owed >= 1; owed-- {
				id := l.next.Add(1)
				l.produce(ctx, order{ID: id, Kind: kindSteady, Key: "customer-" + strconv.FormatInt(id%int64(l.keys), 10)})
			}
		}
	}
}

// one writes one record of kind k with its own key and returns its id.
func (l *load) one(ctx context.Context, k string) int64 {
	id := l.next.Add(1)
	l.produce(ctx, order{ID: id, Kind: k, Key: k + "-" + strconv.FormatInt(id, 10)})
	return id
}

// burst writes n records of kind k at once, each with its own key, and
// returns their ids.
func (l *load) burst(ctx context.Context, k string, n int) []int64 {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = l.one(ctx, k)
	}
	return ids
}

func (l *load) produce(ctx context.Context, o order) {
	o.Produced = time.Now().UnixNano()
	v, _ := json.Marshal(o)
	l.wg.Add(1)
	l.send(ctx, &kgo.Record{Topic: l.topic, Key: []byte(o.Key), Value: v,
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}}},
		func(_ *kgo.Record, err error) {
			defer l.wg.Done()
			l.mu.Lock()
			defer l.mu.Unlock()
			if err != nil {
				l.errs = append(l.errs, err)
				return
			}
			l.produced[o.ID] = o
		})
}

// wait waits for every record produced so far to be acknowledged by the
// brokers and returns the first produce error.
func (l *load) wait() error {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) > 0 {
		return fmt.Errorf("producing game day records: %d failed, first: %w", len(l.errs), l.errs[0])
	}
	return nil
}

// records returns the records produced so far, by id.
func (l *load) records() map[int64]order {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int64]order, len(l.produced))
	for k, v := range l.produced {
		out[k] = v
	}
	return out
}
