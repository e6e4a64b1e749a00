package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/retrytopics"
)

// A Go program runs the engine in-process with a handler function instead
// of an HTTP application. The handler acknowledges a record by returning
// nil and sends it to the dead-letter topic with delivery.Permanent; any
// other error would move it to the next retry tier.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// An in-memory Kafka-protocol broker (franz-go's kfake) on a free
	// port, with the source topic; the engine creates its tier, parking
	// and DLQ topics itself.
	b, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0), kfake.SeedTopics(1, "orders"))
	if err != nil {
		panic(err)
	}
	defer b.Close()

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	for _, v := range []string{"a", "b", "c"} {
		r := &kgo.Record{Topic: "orders", Key: []byte("order-" + v), Value: []byte(v)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			panic(err)
		}
	}

	var (
		mu        sync.Mutex
		delivered []string
		all       = make(chan struct{})
	)
	handle := func(_ context.Context, m *delivery.Message) error {
		if string(m.Value) == "c" {
			// Retrying will not help: straight to orders.dlq.
			return delivery.Permanent(errors.New("no stock for " + string(m.Value)))
		}
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, string(m.Value))
		if len(delivered) == 2 {
			close(all)
		}
		return nil
	}

	e, err := engine.New(ctx, engine.Options{
		Brokers: b.ListenAddrs(),
		Plan: retrytopics.Plan{
			Source: "orders",
			Tiers:  []retrytopics.Tier{{Topic: retrytopics.TierTopic("orders", time.Second), Delay: time.Second}},
			DLQ:    retrytopics.DLQTopic("orders"),
		},
		Group:     "orders-kretry",
		Deliverer: delivery.HandlerFunc(handle),
		// Ordering defaults to flow.OrderingKey, as in the YAML config:
		// later records of a retrying key park in orders.parking.
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(rctx) }()

	// Records of different keys are delivered concurrently: sort to print.
	select {
	case <-all:
	case <-ctx.Done():
		panic("records not delivered in time")
	}
	mu.Lock()
	sort.Strings(delivered)
	for _, v := range delivered {
		fmt.Println("delivered", v)
	}
	mu.Unlock()
	// The DLQ move is written by the next transaction (every 100ms).
	for e.Stats().Permanent.Load() < 1 {
		if ctx.Err() != nil {
			panic("record not dead-lettered in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("dead-lettered c")

	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// delivered a
	// delivered b
	// dead-lettered c
}
