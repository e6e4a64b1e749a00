package kafkatest

import (
	"context"
	"net"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPomNamesKafkaVersion(t *testing.T) {
	m := regexp.MustCompile(`<kafka.version>([^<]+)</kafka.version>`).FindSubmatch(pom)
	if m == nil || string(m[1]) != KafkaVersion {
		t.Fatalf("pom.xml kafka.version = %q, KafkaVersion = %q: keep them equal", m, KafkaVersion)
	}
}

func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		env  string
		want []Kind
		err  bool
	}{
		{"", []Kind{Embedded, Kafka}, false},
		{"both", []Kind{Embedded, Kafka}, false},
		{"kafka", []Kind{Kafka}, false},
		{"embedded", []Kind{Embedded}, false},
		{"kfake", nil, true},
	} {
		t.Setenv(EnvBroker, tc.env)
		got, err := Kinds()
		if (err != nil) != tc.err || len(got) != len(tc.want) {
			t.Errorf("%s=%q: got %v, %v; want %v (error %v)", EnvBroker, tc.env, got, err, tc.want, tc.err)
		}
	}
}

// TestSingleNodeProduceConsumeTransaction starts one node, writes a record
// in a transaction and reads it back read_committed.
func TestSingleNodeProduceConsumeTransaction(t *testing.T) {
	c := New(t, Config{})
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.TransactionalID("kafkatest"),
		kgo.ConsumeTopics("t"), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(pctx)
		if err := pctx.Err(); err != nil {
			t.Fatal("no record read back:", err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			if string(recs[0].Value) != "v" {
				t.Fatalf("read %q, want v", recs[0].Value)
			}
			return
		}
	}
}

// TestThreeNodesSurviveKillAndRestart kills one of three nodes, writes with
// acks=all (min ISR 2 holds), restarts it, and checks that no process of
// the cluster is left after Stop.
func TestThreeNodesSurviveKillAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	c := New(t, Config{Nodes: 3})
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, "t"); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	if c.Running(2) {
		t.Fatal("node 2 runs after Kill")
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal("produce with one node of three down:", err)
	}
	if err := c.Restart(ctx, 2); err != nil {
		t.Fatal(err)
	}
	pids := c.pids()
	c.Stop()
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + itoa(pid)); err == nil {
			t.Errorf("process %d still exists after Stop", pid)
		}
	}
}

// TestStartTriesAgainOnATakenPort: a port taken between placeNodes and
// the node's bind (here by the test, on the first start only) makes that
// start fail with "Address already in use"; Start places the nodes again
// and the cluster serves.
func TestStartTriesAgainOnATakenPort(t *testing.T) {
	var starts int
	var taken net.Listener
	placed = func(c *Cluster) {
		starts++
		if starts == 1 {
			l, err := net.Listen("tcp", "127.0.0.1:"+itoa(c.nodes[0].port))
			if err != nil {
				t.Fatal(err)
			}
			taken = l
		}
	}
	t.Cleanup(func() {
		placed = nil
		if taken != nil {
			taken.Close()
		}
	})
	c := New(t, Config{})
	if starts != 2 {
		t.Fatalf("the cluster started after %d placements, want 2 (the first port taken)", starts)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).ListBrokers(context.Background()); err != nil {
		t.Fatalf("the cluster started on new ports does not answer: %v", err)
	}
}
