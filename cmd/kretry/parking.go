package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/engine"
	"github.com/kretry/kretry/pkg/sidecar"
)

// cmdParking is `kretry parking release`: it writes an operator release op
// for one key to the topic's parking topic; the instance that owns the
// partition delivers the key's parked records (a key held under
// on_dead_letter: hold).
func cmdParking(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "release" {
		fmt.Fprintln(stderr, "usage: kretry parking release -c config.yaml --topic TOPIC --key KEY [--partition N]")
		return exitUsage
	}
	fs := newFlags("parking release", stderr)
	path := fs.String("c", os.Getenv(config.EnvConfigFile), "config file (YAML)")
	topic := fs.String("topic", "", "source topic (as in topics[].name)")
	key := fs.String("key", "", "record key to release")
	partition := fs.Int("partition", -1, "partition of the key (default: the Kafka default partitioner's choice, murmur2)")
	if err := fs.Parse(args[1:]); err != nil {
		return exitUsage
	}
	if *path == "" || *topic == "" || *key == "" {
		fmt.Fprintln(stderr, "kretry parking release: -c, --topic and --key are required")
		return exitUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintf(stderr, "kretry parking release: invalid config %s:\n%s\n", *path, indent(err.Error()))
		return exitUsage
	}
	var t *config.Topic
	for i := range cfg.Topics {
		if cfg.Topics[i].Name == *topic {
			t = &cfg.Topics[i]
		}
	}
	if t == nil {
		fmt.Fprintf(stderr, "kretry parking release: topic %q is not in %s\n", *topic, *path)
		return exitUsage
	}
	if t.Ordering == config.OrderingNone {
		fmt.Fprintf(stderr, "kretry parking release: topic %q has ordering none: nothing is ever parked\n", *topic)
		return exitUsage
	}
	if len(cfg.Kafka.Brokers) == 1 && cfg.Kafka.Brokers[0] == config.Embedded {
		cfg.Kafka.Brokers = []string{cfg.Embedded.Listen}
	}
	opts, err := sidecar.ClientOpts(&cfg.Kafka, newLogger(config.Log{Level: "warn", Format: "text"}, stderr))
	if err != nil {
		fmt.Fprintf(stderr, "kretry parking release: %v\n", err)
		return exitFail
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		fmt.Fprintf(stderr, "kretry parking release: %v\n", err)
		return exitFail
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	p := int32(*partition)
	if p < 0 {
		ds, err := kadm.NewClient(cl).ListTopics(cctx, t.Name)
		if err != nil || !ds.Has(t.Name) {
			fmt.Fprintf(stderr, "kretry parking release: cannot read topic %q: %v\n", t.Name, err)
			return exitFail
		}
		n := len(ds[t.Name].Partitions)
		p = int32(kgo.StickyKeyPartitioner(nil).ForTopic(t.Name).Partition(&kgo.Record{Key: []byte(*key)}, n))
	}
	r := engine.OperatorRelease(t.Parking.Topic, p, []byte(*key))
	if err := cl.ProduceSync(cctx, r).FirstErr(); err != nil {
		fmt.Fprintf(stderr, "kretry parking release: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "release of key %q written to %s partition %d; the owner of that partition delivers its parked records\n",
		*key, t.Parking.Topic, p)
	return exitOK
}
