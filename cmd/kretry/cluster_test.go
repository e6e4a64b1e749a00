package main

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
)

// testCluster is an embedded broker with topics of partitions each, and a
// client (manual partitioner: records go to the partition they name) and
// its admin, closed at the end of the test.
func testCluster(t *testing.T, partitions int32, topics ...string) (*broker.Broker, *kgo.Client, *kadm.Client) {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	for _, topic := range topics {
		if _, err := adm.CreateTopic(context.Background(), partitions, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	return b, cl, adm
}
