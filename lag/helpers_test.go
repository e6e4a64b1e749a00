package lag_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/lag"
)

// cluster is one broker for a test: a fresh embedded broker, or in the
// real-Kafka pass (see TestMain) a fresh Apache Kafka node.
type cluster struct {
	t     testing.TB
	b     *broker.Broker     // embedded pass
	kafka *kafkatest.Cluster // kafka pass
	dir   string             // the embedded broker's data, kept across stopBroker/startBroker
	addrs []string
	cl    *kgo.Client
	adm   *kadm.Client
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	c := &cluster{t: t}
	if brokerKind == kafkatest.Kafka {
		c.kafka = kafkatest.New(t, kafkatest.Config{})
		c.addrs = c.kafka.Addrs()
	} else {
		c.dir = t.TempDir()
		c.startBroker("127.0.0.1:0")
		c.addrs = c.b.Addrs()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RetryTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	c.cl, c.adm = cl, kadm.NewClient(cl)
	return c
}

// startBroker starts (or restarts) the broker on listen, on its data.
func (c *cluster) startBroker(listen string) {
	c.t.Helper()
	if c.kafka != nil {
		if err := c.kafka.Restart(context.Background(), 1); err != nil {
			c.t.Fatal(err)
		}
		return
	}
	b, err := broker.Start(broker.Config{Listen: listen, Partitions: 1, DataDir: c.dir,
		Opts: []kfake.Opt{kfake.GroupMinSessionTimeout(100 * time.Millisecond)}})
	if err != nil {
		c.t.Fatal(err)
	}
	c.b = b
	c.t.Cleanup(b.Close)
}

// stopBroker stops the broker as a crash would (kill -9 for Kafka).
func (c *cluster) stopBroker() {
	c.t.Helper()
	if c.kafka != nil {
		if err := c.kafka.Kill(1); err != nil {
			c.t.Fatal(err)
		}
		return
	}
	c.b.Close()
}

func (c *cluster) createTopic(name string, partitions int32) {
	c.t.Helper()
	resp, err := c.adm.CreateTopic(context.Background(), partitions, 1, nil, name)
	if err == nil {
		err = resp.Err
	}
	if err == nil {
		err = kafkatest.WaitTopics(context.Background(), c.adm, name)
	}
	if err != nil {
		c.t.Fatalf("create topic %s: %v", name, err)
	}
}

func (c *cluster) deleteTopic(name string) {
	c.t.Helper()
	resp, err := c.adm.DeleteTopic(context.Background(), name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		c.t.Fatalf("delete topic %s: %v", name, err)
	}
}

// produce writes n records to one partition, each with timestamp ts.
func (c *cluster) produce(topic string, partition int32, n int, ts time.Time) {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "v%d", i), Timestamp: ts}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		c.t.Fatal(err)
	}
}

// produceTxn writes n records to one partition in one transaction, ended
// with commit or abort; commit == nil leaves it open (the producer is
// returned so that the test can end it later).
func (c *cluster) produceTxn(topic string, partition int32, n int, ts time.Time, commit *bool) *kgo.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(fmt.Sprintf("txn-%s-%d-%d", topic, partition, time.Now().UnixNano())))
	if err != nil {
		c.t.Fatal(err)
	}
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		c.t.Fatal(err)
	}
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "t%d", i), Timestamp: ts}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			c.t.Fatal(err)
		}
	}
	if commit == nil {
		c.t.Cleanup(cl.Close)
		return cl
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(*commit)); err != nil {
		c.t.Fatal(err)
	}
	c.waitMarker(cl, topic, partition)
	cl.Close()
	return nil
}

// waitMarker waits until the transaction's marker is in topic/partition:
// Kafka's EndTxn answers once the coordinator has decided, and writes the
// markers to the partitions after (kfake before it answers), so until
// then the last stable offset stays at the transaction's first record.
// The marker is in when the last stable offset reaches the high watermark.
func (c *cluster) waitMarker(cl *kgo.Client, topic string, partition int32) {
	c.t.Helper()
	adm := kadm.NewClient(cl)
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for {
		hwm, err1 := adm.ListEndOffsets(ctx, topic)
		lso, err2 := adm.ListCommittedOffsets(ctx, topic)
		h, okH := hwm.Lookup(topic, partition)
		l, okL := lso.Lookup(topic, partition)
		if err1 == nil && err2 == nil && okH && okL && h.Err == nil && l.Err == nil && l.Offset == h.Offset {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s[%d]: the transaction marker is not in after 30s (high watermark %+v, last stable offset %+v; %v %v)", topic, partition, h, l, err1, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) commit(group, topic string, partition int32, offset int64) {
	c.t.Helper()
	c.commitMeta(group, topic, partition, offset, "")
}

// commitMeta commits offset with metadata meta.
func (c *cluster) commitMeta(group, topic string, partition int32, offset int64, meta string) {
	c.t.Helper()
	// A fresh client: a shared one may cache the ID of a deleted topic.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: topic, Partition: partition, At: offset, LeaderEpoch: -1, Metadata: meta})
	if err := kadm.NewClient(cl).CommitAllOffsets(context.Background(), group, os); err != nil {
		c.t.Fatalf("commit %s %s[%d]@%d: %v", group, topic, partition, offset, err)
	}
}

func (c *cluster) deleteRecords(topic string, partition int32, before int64) {
	c.t.Helper()
	var os kadm.Offsets
	os.AddOffset(topic, partition, before, -1)
	resp, err := c.adm.DeleteRecords(context.Background(), os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		c.t.Fatalf("delete records %s[%d] before %d: %v", topic, partition, before, err)
	}
}

func (c *cluster) monitor(cfg lag.Config, opts ...lag.Option) *lag.Monitor {
	c.t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	opts = append([]lag.Option{lag.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	m, err := lag.New(c.cl, cfg, opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { m.Close() })
	return m
}

func scan(t testing.TB, m *lag.Monitor) *lag.Snapshot {
	t.Helper()
	snap, err := m.Scan(context.Background())
	if err != nil {
		t.Fatalf("scan: %v", err)
	}
	return snap
}

func findRow(t testing.TB, snap *lag.Snapshot, group, topic string, partition int32) lag.Row {
	t.Helper()
	for _, r := range snap.Rows {
		if r.Group == group && r.Topic == topic && r.Partition == partition {
			return r
		}
	}
	t.Fatalf("no row for %s %s[%d] in %+v", group, topic, partition, snap.Rows)
	return lag.Row{}
}

func hasRow(snap *lag.Snapshot, group, topic string) bool {
	for _, r := range snap.Rows {
		if r.Group == group && r.Topic == topic {
			return true
		}
	}
	return false
}

// fixedClock is a clock a test moves by hand.
type fixedClock struct{ t time.Time }

func (c *fixedClock) now() time.Time { return c.t }

// TestMain runs every test once per broker ($KRETRY_TEST_BROKER; see
// internal/kafkatest).
func TestMain(m *testing.M) {
	os.Exit(kafkatest.RunMain(m, func(k kafkatest.Kind) { brokerKind = k }))
}

// brokerKind is the broker of the current pass.
var brokerKind = kafkatest.Embedded
