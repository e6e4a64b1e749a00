package lag_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/lag"
)

// requestCounter counts the requests a client writes, per API key.
type requestCounter struct{ n [128]atomic.Int64 }

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil && int(key) < len(c.n) {
		c.n[key].Add(1)
	}
}

func (c *requestCounter) take() map[string]int64 {
	out := map[string]int64{}
	for k := range c.n {
		if n := c.n[k].Swap(0); n > 0 {
			out[kmsg.NameForKey(int16(k))] = n
		}
	}
	return out
}

// fleet is groups × (topics × partitions) with records and commits: every
// group commits to every partition, group g at offset g mod records, so
// that most partitions lag and groups share offsets.
type fleet struct {
	addrs  []string
	groups []lag.Group
	rows   int
}

func newFleet(tb testing.TB, addrs []string, groups, topics, partitions, records int) *fleet {
	tb.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1<<20))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	old := time.Now().Add(-time.Hour)
	var recs []*kgo.Record
	f := &fleet{addrs: addrs}
	var names []string
	for t := range topics {
		name := fmt.Sprintf("bench-%02d", t)
		names = append(names, name)
		resp, err := adm.CreateTopic(ctx, int32(partitions), 1, nil, name)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			tb.Fatal(err)
		}
		for p := range partitions {
			for i := range records {
				recs = append(recs, &kgo.Record{Topic: name, Partition: int32(p), Value: []byte("v"), Timestamp: old.Add(time.Duration(i) * time.Second)})
			}
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		tb.Fatal(err)
	}
	for g := range groups {
		var os kadm.Offsets
		for _, name := range names {
			for p := range partitions {
				os.AddOffset(name, int32(p), int64(g%records), -1)
			}
		}
		group := fmt.Sprintf("group-%02d", g)
		if err := adm.CommitAllOffsets(ctx, group, os); err != nil {
			tb.Fatal(err)
		}
		f.groups = append(f.groups, lag.Group{Name: group, ReadCommitted: g%2 == 0})
	}
	f.rows = groups * topics * partitions
	return f
}

// BenchmarkScan is the measure: one scan of 50 groups × 1,000
// partitions (10 topics × 100) on the embedded broker, 20 records per
// partition. "cold" starts each scan with a new Monitor (every age is
// fetched); "warm" rescans with one Monitor while the commits stand still
// (ages come from the cache). It reports the time and allocations of a
// scan and the requests it sent, per API.
//
//	go test ./lag -run '^$' -bench Scan -benchtime 5x
func BenchmarkScan(b *testing.B) {
	c := newCluster(b)
	f := newFleet(b, c.addrs, 50, 10, 100, 20)
	for _, mode := range []string{"cold", "warm"} {
		b.Run(mode, func(b *testing.B) {
			counter := &requestCounter{}
			cl, err := kgo.NewClient(kgo.SeedBrokers(f.addrs...), kgo.WithHooks(counter))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			newMonitor := func() *lag.Monitor {
				m, err := lag.New(cl, lag.Config{Groups: f.groups, Timeout: time.Minute, PerPartition: true},
					lag.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					b.Fatal(err)
				}
				return m
			}
			m := newMonitor()
			if _, err := m.Scan(context.Background()); err != nil { // warms the client's connections and metadata
				b.Fatal(err)
			}
			counter.take()
			b.ReportAllocs()
			b.ResetTimer()
			var snap *lag.Snapshot
			for b.Loop() {
				if mode == "cold" {
					b.StopTimer()
					m = newMonitor()
					b.StartTimer()
				}
				if snap, err = m.Scan(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if len(snap.Rows) != f.rows {
				b.Fatalf("%d rows, want %d", len(snap.Rows), f.rows)
			}
			for _, r := range snap.Rows {
				if r.Lag > 0 && !r.AgeKnown {
					b.Fatalf("age unknown: %+v", r)
				}
			}
			b.ReportMetric(float64(len(snap.Rows)), "rows/scan")
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/scan")
			for api, n := range counter.take() {
				b.ReportMetric(float64(n)/float64(b.N), api+"-req/scan")
			}
		})
	}
}

// TestScanBatches: the number of requests of a scan does not grow with
// the partitions: per broker one request per offset kind, and a fetch
// round per leader and isolation level. Three brokers, 8 groups × 300
// partitions.
func TestScanBatches(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	f := newFleet(t, kc.ListenAddrs(), 8, 3, 100, 5)
	counter := &requestCounter{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addrs...), kgo.WithHooks(counter))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	m, err := lag.New(cl, lag.Config{Groups: f.groups, Timeout: 10 * time.Second}, lag.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Scan(context.Background()); err != nil { // connections, coordinators, metadata
		t.Fatal(err)
	}
	m2, _ := lag.New(cl, lag.Config{Groups: f.groups, Timeout: 10 * time.Second}, lag.WithLogger(slog.New(slog.DiscardHandler)))
	counter.take()
	snap, err := m2.Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := counter.take()
	t.Logf("%d rows; requests %v", len(snap.Rows), got)
	const brokers = 3
	for api, max := range map[string]int64{
		"ListOffsets":    3 * brokers,
		"OffsetFetch":    brokers, // one per group coordinator
		"DescribeGroups": brokers,
		"Metadata":       2,
		"Fetch":          2 * brokers * 2, // read committed and not, per leader; two rounds at most here
	} {
		if got[api] > max {
			t.Errorf("%s: %d requests for %d rows, want at most %d", api, got[api], len(snap.Rows), max)
		}
	}
	for _, r := range snap.Rows {
		if r.Lag > 0 && !r.AgeKnown {
			t.Fatalf("age unknown: %+v", r)
		}
	}
}
