package blocking_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/blocking"
	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/pkg/delivery"
)

var brokerKind = kafkatest.Embedded

func TestMain(m *testing.M) {
	os.Exit(kafkatest.RunMain(m, func(k kafkatest.Kind) { brokerKind = k }))
}

func brokers(t *testing.T) []string {
	t.Helper()
	if brokerKind == kafkatest.Kafka {
		return kafkatest.New(t, kafkatest.Config{}).Addrs()
	}
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

// TestBlockingRetriesInPlace: a transient failure is retried in place
// after each backoff, holding back the records behind it on its partition;
// a permanent failure and a record still failing after the last backoff are
// dead-lettered with their bytes; everything else is handled once, in
// partition order.
func TestBlockingRetriesInPlace(t *testing.T) {
	addrs := brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "orders.blocking-dlq"); err != nil {
		t.Fatal(err)
	}
	if err := kafkatest.WaitTopics(ctx, adm, "orders", "orders.blocking-dlq"); err != nil {
		t.Fatal(err)
	}
	// 0 ok, 1 fails once, 2 permanent, 3 fails forever, 4 ok
	for i := range 5 {
		r := &kgo.Record{Topic: "orders", Key: []byte("k"), Value: []byte(strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte{0, 1}}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu    sync.Mutex
		calls []string
		done  = make(chan struct{})
	)
	h := func(_ context.Context, r *kgo.Record) error {
		v := string(r.Value)
		mu.Lock()
		calls = append(calls, v)
		n := 0
		for _, c := range calls {
			if c == v {
				n++
			}
		}
		mu.Unlock()
		switch {
		case v == "1" && n == 1, v == "3":
			return delivery.Transient(errors.New("busy"))
		case v == "2":
			return delivery.Permanent(errors.New("bad order"))
		case v == "4":
			close(done)
		}
		return nil
	}
	stop, err := blocking.Start(ctx, blocking.Config{Brokers: addrs, Topic: "orders", Group: "g",
		Backoffs: []time.Duration{time.Millisecond, 2 * time.Millisecond}, FetchMaxWait: 50 * time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("record 4 was never handled")
	}
	mu.Lock()
	got := append([]string(nil), calls...)
	mu.Unlock()
	want := []string{"0", "1", "1", "2", "3", "3", "3", "4"}
	if !slices.Equal(got, want) {
		t.Errorf("handled %v, want %v (retries in place, in order)", got, want)
	}

	dlq, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("orders.blocking-dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close()
	var dead []*kgo.Record
	for len(dead) < 2 && ctx.Err() == nil {
		dead = append(dead, dlq.PollFetches(ctx).Records()...)
	}
	if len(dead) != 2 || string(dead[0].Value) != "2" || string(dead[1].Value) != "3" {
		t.Fatalf("DLQ holds %d records, want the values 2 and 3", len(dead))
	}
	for _, r := range dead {
		if string(r.Key) != "k" || len(r.Headers) != 1 || string(r.Headers[0].Value) != "\x00\x01" {
			t.Errorf("DLQ record %s lost its key or headers: key %q headers %v", r.Value, r.Key, r.Headers)
		}
	}
}
