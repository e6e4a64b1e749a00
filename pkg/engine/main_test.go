package engine

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/kretry/kretry/internal/kafkatest"
)

// TestMain runs every test once per broker ($KRETRY_TEST_BROKER: embedded,
// kafka or both, the default; see internal/kafkatest).
func TestMain(m *testing.M) {
	code := kafkatest.RunMain(m, func(k kafkatest.Kind) { brokerKind = k })
	kafkaCluster.stop()
	os.Exit(code)
}

// brokerKind is the broker of the current pass.
var brokerKind = kafkatest.Embedded

// kafkaCluster is the one Apache Kafka node the kafka pass shares: a JVM
// start costs seconds, so tests share it and each takes its own topic and
// group names (see topicSeq).
var kafkaCluster sharedCluster

// topicSeq numbers the source topics of tests on the shared cluster.
var topicSeq atomic.Int64

type sharedCluster struct {
	once sync.Once
	c    *kafkatest.Cluster
	err  error
}

// addrs starts the shared node on first use and returns its addresses.
func (s *sharedCluster) addrs(t testing.TB) []string {
	t.Helper()
	s.once.Do(func() { s.c, s.err = kafkatest.Start(context.Background(), kafkatest.Config{}) })
	if s.err != nil {
		t.Fatal(s.err)
	}
	if t.Name() != "" {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("kafka log tail:\n%s", s.c.LogTail(1, 3000))
			}
		})
	}
	return s.c.Addrs()
}

func (s *sharedCluster) stop() {
	if s.c != nil {
		s.c.Stop()
	}
}

// sourceTopic is the source topic name of a new env: "orders" on a fresh
// embedded broker, "orders-N" on the shared Kafka node.
func sourceTopic() string {
	if brokerKind == kafkatest.Kafka {
		return "orders-" + strconv.FormatInt(topicSeq.Add(1), 10)
	}
	return "orders"
}

// group is the consumer group of the env's engines.
func (e *env) group() string { return e.plan.Source + "-kretry" }
