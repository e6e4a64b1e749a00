package topicread

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReadsToATransactionMarker: a partition whose last stable offset is
// one past a commit marker is read to its end (the marker is the record at
// end-1), an aborted record is not handed to fn, and the read returns
// rather than waiting for a data record that will never come.
func TestReadsToATransactionMarker(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, commit := range []kgo.TransactionEndTry{kgo.TryAbort, kgo.TryCommit} {
		pr, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("tx"), kgo.DefaultProduceTopic("t"))
		if err != nil {
			t.Fatal(err)
		}
		if err := pr.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		v := map[kgo.TransactionEndTry]string{kgo.TryAbort: "aborted", kgo.TryCommit: "committed"}[commit]
		if err := pr.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := pr.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
		pr.Close()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup("t", 0)
	if end.Offset != 4 {
		t.Fatalf("last stable offset %d, want 4 (aborted, abort marker, committed, commit marker)", end.Offset)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"t": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []string
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := To(rctx, rd, "t", map[int32]int64{0: end.Offset}, func(r *kgo.Record) { got = append(got, string(r.Value)) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "committed" {
		t.Errorf("read %q, want only the committed record", got)
	}
}
