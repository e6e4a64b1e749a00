// Package blocking is the blocking-retry consumer that kretry is measured
// against: the way Dapr's Kafka component and Karafka retry. One goroutine
// per partition handles its records one at a time; a transient failure is
// retried in place after a backoff, blocking the partition meanwhile; a
// permanent failure, or a failure after the last backoff, is written to a
// dead-letter topic (synchronously) and the partition moves on. Offsets
// are marked after each record and autocommitted every second.
//
// It is a peer for comparisons, not a product: the benchmark (e2e/bench,
// peer "blocking") and `kretry gameday` run this same code, so the two
// report on one implementation.
package blocking

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
)

// Handler handles one record. nil means done; an error is classified by
// delivery.Classify with delivery.DefaultStatuses: permanent goes to the
// DLQ at once, anything else is retried after the next backoff.
type Handler func(ctx context.Context, r *kgo.Record) error

// Config configures Start.
type Config struct {
	// Brokers are the seed brokers.
	Brokers []string
	// Topic is consumed by the consumer group Group.
	Topic, Group string
	// DLQ is the dead-letter topic; "" means Topic + ".blocking-dlq". A
	// dead-lettered record keeps its partition, key, value and headers.
	DLQ string
	// Backoffs are the waits before each retry: a record is handled at
	// most len(Backoffs)+1 times.
	Backoffs []time.Duration
	// FetchMaxWait is the client's fetch max wait; 0 keeps franz-go's
	// default (5s).
	FetchMaxWait time.Duration
	// Opts are further client options (TLS, SASL, a logger).
	Opts []kgo.Opt
}

// DLQTopic is the dead-letter topic of c.
func (c *Config) DLQTopic() string {
	if c.DLQ != "" {
		return c.DLQ
	}
	return c.Topic + ".blocking-dlq"
}

// Start joins the group and consumes until ctx ends or stop is called;
// stop waits for the partition goroutines and closes the client. The error
// is the client's construction error.
func Start(ctx context.Context, c Config, h Handler) (stop func(), err error) {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ConsumerGroup(c.Group),
		kgo.ConsumeTopics(c.Topic), kgo.AutoCommitMarks(), kgo.AutoCommitInterval(time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}
	if c.FetchMaxWait > 0 {
		opts = append(opts, kgo.FetchMaxWait(c.FetchMaxWait))
	}
	cl, err := kgo.NewClient(append(opts, c.Opts...)...)
	if err != nil {
		return nil, err
	}
	dlq := c.DLQTopic()
	handle := func(ctx context.Context, r *kgo.Record) {
		for attempt := 0; ; attempt++ {
			err := h(ctx, r)
			if err == nil {
				break
			}
			permanent := delivery.Classify(err, delivery.DefaultStatuses).Class == delivery.ClassPermanent
			if permanent || attempt >= len(c.Backoffs) {
				d := &kgo.Record{Topic: dlq, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers}
				_ = cl.ProduceSync(ctx, d).FirstErr()
				break
			}
			select {
			case <-time.After(c.Backoffs[attempt]):
			case <-ctx.Done():
				return
			}
		}
		cl.MarkCommitRecords(r)
	}
	var wg sync.WaitGroup
	workers := map[int32]*partitionWorker{}
	stopLoop := runLoop(ctx, func(ctx context.Context) {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			if fs.IsClientClosed() {
				return
			}
			fs.EachPartition(func(p kgo.FetchTopicPartition) {
				if len(p.Records) == 0 {
					return
				}
				w := workers[p.Partition]
				if w == nil {
					w = newPartitionWorker()
					workers[p.Partition] = w
					wg.Go(func() { w.run(ctx, handle) })
				}
				w.push(p.Records)
			})
		}
	})
	return func() { stopLoop(); wg.Wait(); cl.Close() }, nil
}

// runLoop runs f until ctx ends and returns a func that cancels it and
// waits.
func runLoop(ctx context.Context, f func(ctx context.Context)) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	return func() { cancel(); <-done }
}

// partitionWorker is one partition's queue and goroutine. The queue is
// unbounded so that a blocked partition never stalls the poll loop (and so
// the other partitions); the callers' record counts bound it.
type partitionWorker struct {
	mu   sync.Mutex
	q    []*kgo.Record
	wake chan struct{}
}

func newPartitionWorker() *partitionWorker {
	return &partitionWorker{wake: make(chan struct{}, 1)}
}

func (w *partitionWorker) push(rs []*kgo.Record) {
	w.mu.Lock()
	w.q = append(w.q, rs...)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *partitionWorker) run(ctx context.Context, handle func(context.Context, *kgo.Record)) {
	for {
		w.mu.Lock()
		q := w.q
		w.q = nil
		w.mu.Unlock()
		for _, r := range q {
			if ctx.Err() != nil {
				return
			}
			handle(ctx, r)
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return
		}
	}
}
