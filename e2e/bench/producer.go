package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

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
