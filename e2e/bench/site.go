package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/kafkatest"
)

// Broker kinds a table runs on (-broker).
const (
	siteEmbedded = "embedded" // kfake (internal/broker), a fresh broker per run
	siteKafka    = "kafka"    // Apache Kafka (internal/kafkatest), one cluster per table
)

// kafkaJVMOpts are the broker JVM's options on the Kafka site: those of
// Kafka's own bin/kafka-server-start.sh and kafka-run-class.sh (1 GiB
// heap, G1 with a 20ms pause goal), not kafkatest's start-up-first test
// defaults.
var kafkaJVMOpts = []string{"-Xms1g", "-Xmx1g", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
	"-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"}

// site gives each run of one table its broker.
type site struct {
	kind   string
	inproc bool               // embedded: broker in this process
	kafka  *kafkatest.Cluster // kafka: the one-node cluster of the table
	runs   int
}

// openSite starts what kind needs: nothing for the embedded broker (each
// run starts its own), a one-node Kafka 4.1.1 cluster for kafka (the jars
// are fetched with Maven into ~/.cache/kretry the first time).
func openSite(ctx context.Context, kind string, inproc bool) (*site, error) {
	s := &site{kind: kind, inproc: inproc}
	if kind != siteKafka {
		return s, nil
	}
	if err := kafkatest.Available(); err != nil {
		return nil, fmt.Errorf("-broker kafka: %w", err)
	}
	c, err := kafkatest.Start(ctx, kafkatest.Config{Nodes: 1, JVMOpts: kafkaJVMOpts, StartTimeout: 3 * time.Minute})
	if err != nil {
		return nil, fmt.Errorf("-broker kafka: starting Kafka %s: %w", kafkatest.KafkaVersion, err)
	}
	s.kafka = c
	if err := warm(ctx, c.Addrs()); err != nil {
		c.Stop()
		return nil, fmt.Errorf("-broker kafka: warming the cluster: %w", err)
	}
	return s, nil
}

// warm runs one transaction and one group commit on a fresh cluster before
// the first run. A fresh Kafka cluster creates its internal topics
// (__transaction_state, __consumer_offsets: 50 partitions each) when they
// are first used, and its transaction and group code paths start cold:
// whichever peer ran first paid it, and kretry's first delivery after
// partitions were assigned took 119–128ms on the table's first run against
// 25–40ms on the others. A cluster a user runs kretry on has been used
// before.
func warm(ctx context.Context, addrs []string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	const topic = "bench-warm"
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID(topic), kgo.ConsumerGroup(topic),
		kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit())
	if err != nil {
		return err
	}
	defer cl.Close()
	if _, err := createTopics(ctx, cl, 1, topic); err != nil {
		return err
	}
	defer deleteTopics(addrs, topic)
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("warm")}).FirstErr(); err != nil {
		return err
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return err
	}
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if fs.NumRecords() > 0 {
			return cl.CommitUncommittedOffsets(ctx)
		}
	}
}

func (s *site) close() {
	if s.kafka != nil {
		s.kafka.Stop()
	}
}

// describe names the broker for the table's header.
func (s *site) describe() string {
	switch {
	case s.kind == siteKafka:
		return fmt.Sprintf("Apache Kafka %s, one KRaft node (JVM: %s), fresh topics per run", kafkatest.KafkaVersion, strings.Join(kafkaJVMOpts, " "))
	case s.inproc:
		return "embedded (kfake), in this process, fresh per run"
	}
	return "embedded (kfake), child process, fresh per run"
}

// broker returns the broker of the next run, whose source topic is to have
// the given partitions (the embedded broker's default for topics kretry
// creates).
func (s *site) broker(partitions int) (*benchBroker, error) {
	s.runs++
	topic := fmt.Sprintf("bench-%d", s.runs)
	if s.kafka == nil {
		b, err := startBroker(s.inproc, partitions)
		if err != nil {
			return nil, err
		}
		b.topic = topic
		return b, nil
	}
	addrs := s.kafka.Addrs()
	return &benchBroker{addrs: addrs, topic: topic, pid: s.kafka.PID(1), done: func() { deleteTopics(addrs, topic) }}, nil
}

// deleteTopics deletes the run's topics on Kafka (the source and every
// topic named after it: tiers, parking, DLQs, Spring's retry topics), so
// that the next run starts on a broker as empty as the first.
func deleteTopics(addrs []string, topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	names, err := adm.ListTopics(ctx)
	if err != nil {
		return
	}
	var del []string
	for _, n := range names.Names() {
		if n == topic || strings.HasPrefix(n, topic+".") || strings.HasPrefix(n, topic+"-") {
			del = append(del, n)
		}
	}
	if len(del) > 0 {
		_, _ = adm.DeleteTopics(ctx, del...)
	}
}

// createTopics creates topics with the given partitions (replication 1)
// and, on Kafka, waits until each partition has a leader.
func createTopics(ctx context.Context, cl *kgo.Client, partitions int, topics ...string) (kadm.CreateTopicResponses, error) {
	adm := kadm.NewClient(cl)
	created, err := adm.CreateTopics(ctx, int32(partitions), 1, nil, topics...)
	if err == nil {
		err = created.Error()
	}
	if err != nil {
		return nil, err
	}
	if err := waitLeaders(ctx, adm, 3*time.Minute, partitions, topics...); err != nil {
		return nil, err
	}
	return created, nil
}

// waitLeaders waits until each of the partitions of every topic answers
// ListOffsets, as kafkatest.WaitTopics does but for up to d: one Kafka node
// creating 4,000 partitions on a loaded machine needs more than
// WaitTopics' 30s.
func waitLeaders(ctx context.Context, adm *kadm.Client, d time.Duration, partitions int, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		offs, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = offs.Error()
		}
		if err == nil {
			for _, t := range topics {
				if len(offs[t]) < partitions {
					err = fmt.Errorf("%s: %d of %d partitions served", t, len(offs[t]), partitions)
					break
				}
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v not served after %v: %w", topics, d, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
