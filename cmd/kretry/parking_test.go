package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/parking"
)

// TestParkingReleaseFindsThePartition: the key is parked on partition 2,
// which is not where murmur2 would put it; the command must find it there,
// and refuse a key that is parked nowhere.
func TestParkingReleaseFindsThePartition(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	for _, topic := range []string{"orders", "orders.parking"} {
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	key := "customer-42"
	if p := kgo.StickyKeyPartitioner(nil).ForTopic("orders").Partition(&kgo.Record{Key: []byte(key)}, 3); p == 2 {
		t.Fatalf("test assumes murmur2 does not pick partition 2 for %q", key)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders.parking", Partition: 2, Key: []byte(key), Value: []byte("parked")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	yaml := "kafka: {brokers: [" + b.Addrs()[0] + "]}\napp: {url: http://127.0.0.1:1/}\ntopics: [{name: orders, on_dead_letter: hold}]\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	// The lookup's first fetch answers after 1.5s, as a first fetch over
	// SASL_SSL on a loaded machine can: a slow fetch is not the end of the
	// topic (CI once saw "not parked" for a key the engine had just held).
	b.Cluster().ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.Cluster().SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
		return nil, nil, false
	})
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", key}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "partition 2") {
		t.Errorf("output %q does not name partition 2", out.String())
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"orders.parking": {2: kgo.NewOffset().At(1)}}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fs := rd.PollFetches(pctx)
	recs := fs.Records()
	if len(recs) != 1 || string(recs[0].Key) != key || recs[0].Headers[0].Key != parking.HeaderOp {
		t.Fatalf("partition 2 after the parked record holds %v", recs)
	}

	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", "nobody"}, &out, &errb); code == 0 {
		t.Errorf("releasing a key parked nowhere exited 0: %s", out.String())
	}
	if !strings.Contains(errb.String(), "not parked") {
		t.Errorf("stderr %q does not say the key is not parked", errb.String())
	}

	// A --partition the parking topic does not have, or below -1, is a bad
	// flag: exit 2 with the range.
	for _, tc := range []struct{ n, want string }{
		{"7", "--partition 7: orders.parking has partitions 0–2"},
		{"-2", "--partition -2:"},
	} {
		out.Reset()
		errb.Reset()
		if code := run(ctx, []string{"parking", "release", "-c", cfg, "--topic", "orders", "--key", key, "--partition", tc.n}, &out, &errb); code != exitUsage {
			t.Errorf("--partition %s: exit %d, want %d (stderr %q)", tc.n, code, exitUsage, errb.String())
		}
		if !strings.Contains(errb.String(), tc.want) {
			t.Errorf("--partition %s: stderr %q, want %q", tc.n, errb.String(), tc.want)
		}
	}
}
