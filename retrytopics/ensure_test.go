package retrytopics_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/retrytopics"
)

// newAdmin starts an embedded broker (3 partitions for auto-created topics,
// which Ensure must never rely on) and returns an admin client on it.
func newAdmin(t *testing.T) (context.Context, *kadm.Client, *kgo.Client) {
	t.Helper()
	ctx, adm, cl, _ := newBrokerAdmin(t)
	return ctx, adm, cl
}

// newBrokerAdmin is newAdmin that also returns the broker, for tests that
// intercept its requests.
func newBrokerAdmin(t *testing.T) (context.Context, *kadm.Client, *kgo.Client, *broker.Broker) {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, kadm.NewClient(cl), cl, b
}

func createTopic(ctx context.Context, t *testing.T, adm *kadm.Client, topic string, partitions int32, maxBytes int) {
	t.Helper()
	var cfg map[string]*string
	if maxBytes > 0 {
		cfg = map[string]*string{"max.message.bytes": kadm.StringPtr(strconv.Itoa(maxBytes))}
	}
	resp, err := adm.CreateTopic(ctx, partitions, -1, cfg, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("creating %s: %v", topic, err)
	}
}

// partitions returns the partition count of each topic, -1 when missing. It
// asks the broker directly: kadm's ListTopics may answer from kgo's metadata
// cache, which still holds what Ensure saw before creating anything.
func partitions(ctx context.Context, t *testing.T, cl *kgo.Client, topics ...string) map[string]int {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	for _, topic := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, topic := range topics {
		out[topic] = -1
	}
	for _, rt := range resp.Topics {
		if rt.Topic != nil && rt.ErrorCode == 0 {
			out[*rt.Topic] = len(rt.Partitions)
		}
	}
	return out
}

func maxMessageBytes(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			return *c.Value
		}
	}
	t.Fatalf("%s has no max.message.bytes", topic)
	return ""
}

func ensurePlan() *retrytopics.Plan {
	p := &retrytopics.Plan{Source: "orders", DLQ: retrytopics.DLQTopic("orders")}
	for _, d := range []time.Duration{time.Minute, 10 * time.Minute} {
		p.Tiers = append(p.Tiers, retrytopics.Tier{Topic: retrytopics.TierTopic("orders", d), Delay: d})
	}
	return p
}

func TestEnsureCreatesStages(t *testing.T) {
	ctx, adm, cl := newAdmin(t)
	p := ensurePlan()
	createTopic(ctx, t, adm, "orders", 5, 5000) // 5, not the broker's default of 3
	parking := retrytopics.ParkingTopic("orders")
	all := []string{"orders", "orders.retry.1m", "orders.retry.10m", "orders.dlq", parking}

	for run := 1; run <= 2; run++ { // the second run finds everything in place
		got, err := retrytopics.Ensure(ctx, adm, p, 0, parking)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if got.Partitions != 5 {
			t.Errorf("run %d: Partitions = %d, want 5", run, got.Partitions)
		}
		if len(got.MaxBytes) != len(all) {
			t.Errorf("run %d: MaxBytes = %v, want an entry for each of %v", run, got.MaxBytes, all)
		}
		for _, topic := range all {
			want := 5000 + retrytopics.StageHeadroom
			if topic == "orders" {
				want = 5000
			}
			if got.MaxBytes[topic] != want {
				t.Errorf("run %d: MaxBytes[%s] = %d, want %d", run, topic, got.MaxBytes[topic], want)
			}
		}
	}
	for topic, n := range partitions(ctx, t, cl, all...) {
		if n != 5 {
			t.Errorf("%s has %d partitions, want the source's 5", topic, n)
		}
	}
	for _, topic := range all[1:] {
		if got, want := maxMessageBytes(ctx, t, adm, topic), strconv.Itoa(5000+retrytopics.StageHeadroom); got != want {
			t.Errorf("%s max.message.bytes = %s, want the source's 5000 + headroom = %s", topic, got, want)
		}
	}
}

// TestEnsureKeepsStageConfig: an existing stage with the right partition
// count is left alone, and MaxBytes reports its own limit, not the source's.
func TestEnsureKeepsStageConfig(t *testing.T) {
	ctx, adm, cl := newAdmin(t)
	p := ensurePlan()
	createTopic(ctx, t, adm, "orders", 2, 5000)
	createTopic(ctx, t, adm, "orders.dlq", 2, 3000)
	got, err := retrytopics.Ensure(ctx, adm, p, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := retrytopics.StageHeadroom
	want := map[string]int{"orders": 5000, "orders.retry.1m": 5000 + h, "orders.retry.10m": 5000 + h, "orders.dlq": 3000}
	if len(got.MaxBytes) != len(want) {
		t.Errorf("MaxBytes = %v, want %v", got.MaxBytes, want)
	}
	for topic, n := range want {
		if got.MaxBytes[topic] != n {
			t.Errorf("MaxBytes[%s] = %d, want %d", topic, got.MaxBytes[topic], n)
		}
	}
	if got := maxMessageBytes(ctx, t, adm, "orders.dlq"); got != "3000" {
		t.Errorf("orders.dlq max.message.bytes = %s, want its own 3000", got)
	}
	for topic, n := range partitions(ctx, t, cl, "orders.retry.1m", "orders.retry.10m", "orders.dlq") {
		if n != 2 {
			t.Errorf("%s has %d partitions, want 2", topic, n)
		}
	}
}

func TestEnsurePartitionMismatch(t *testing.T) {
	ctx, adm, cl := newAdmin(t)
	p := ensurePlan()
	createTopic(ctx, t, adm, "orders", 3, 0)
	createTopic(ctx, t, adm, "orders.retry.1m", 2, 0)
	createTopic(ctx, t, adm, "orders.dlq", 4, 0)

	got, err := retrytopics.Ensure(ctx, adm, p, 0)
	if !errors.Is(err, retrytopics.ErrPartitionMismatch) {
		t.Fatalf("Ensure = %+v, %v; want ErrPartitionMismatch", got, err)
	}
	if got != nil {
		t.Errorf("Ensure returned %+v with the error, want nil", got)
	}
	for _, want := range []string{
		`"orders.retry.1m" has 2 partitions`,
		`"orders.dlq" has 4 partitions`,
		`source "orders" has 3`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "orders.retry.10m") {
		t.Errorf("error %q blames orders.retry.10m, which was missing and is created", err)
	}
	// The mismatched topics are left as they were.
	n := partitions(ctx, t, cl, "orders.retry.1m", "orders.dlq")
	if n["orders.retry.1m"] != 2 || n["orders.dlq"] != 4 {
		t.Errorf("partition counts after Ensure: %v, want them untouched", n)
	}
}

func TestEnsureMissingSource(t *testing.T) {
	ctx, adm, cl := newAdmin(t)
	p := ensurePlan()
	all := []string{"orders", "orders.retry.1m", "orders.retry.10m", "orders.dlq"}

	t0 := time.Now()
	got, err := retrytopics.Ensure(ctx, adm, p, 0)
	if !errors.Is(err, retrytopics.ErrNoSource) {
		t.Fatalf("Ensure = %+v, %v; want ErrNoSource", got, err)
	}
	if took := time.Since(t0); took < retrytopics.SourceGrace || took > retrytopics.SourceGrace+time.Second {
		t.Errorf("ErrNoSource after %v, want after about SourceGrace %v", took, retrytopics.SourceGrace)
	}
	if !strings.Contains(err.Error(), `"orders"`) {
		t.Errorf("error %q does not name the source", err)
	}
	for topic, n := range partitions(ctx, t, cl, all...) {
		if n != -1 {
			t.Errorf("%s exists with %d partitions after a refused start, want nothing created", topic, n)
		}
	}

	// The same client then creates it: its metadata cache, which has just
	// seen the source missing, must not hide the new topic.
	checkCreateSource(ctx, t, adm, cl, p)
}

func TestEnsureCreateSource(t *testing.T) {
	ctx, adm, cl := newAdmin(t)
	checkCreateSource(ctx, t, adm, cl, ensurePlan())
}

func checkCreateSource(ctx context.Context, t *testing.T, adm *kadm.Client, cl *kgo.Client, p *retrytopics.Plan) {
	t.Helper()
	all := []string{"orders", "orders.retry.1m", "orders.retry.10m", "orders.dlq"}
	got, err := retrytopics.Ensure(ctx, adm, p, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.Partitions != 2 || !got.CreatedSource {
		t.Errorf("Partitions = %d, CreatedSource %v; want 2, true", got.Partitions, got.CreatedSource)
	}
	for topic, n := range partitions(ctx, t, cl, all...) {
		if n != 2 {
			t.Errorf("%s has %d partitions, want 2", topic, n)
		}
	}
	for _, topic := range all {
		want, _ := strconv.Atoi(maxMessageBytes(ctx, t, adm, topic))
		if got.MaxBytes[topic] != want || want <= 0 {
			t.Errorf("MaxBytes[%s] = %d, want the broker's %d", topic, got.MaxBytes[topic], want)
		}
	}

	// An existing source is kept: createSource does not recreate it.
	if got, err = retrytopics.Ensure(ctx, adm, p, 7); err != nil || got.Partitions != 2 || got.CreatedSource {
		t.Errorf("Ensure with the source in place = %+v, %v; want 2 partitions, not created", got, err)
	}
}

// TestEnsureWaitsForASourceABrokerDoesNotKnowYet: a broker that has not yet
// applied a topic's creation answers Metadata without it, and Ensure must
// look again rather than refuse the start. The topic is created only after
// Ensure's first listing has seen it missing.
func TestEnsureWaitsForASourceABrokerDoesNotKnowYet(t *testing.T) {
	ctx, adm, cl, b := newBrokerAdmin(t)

	listed := make(chan struct{})
	var once sync.Once
	b.Cluster().ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		for _, rt := range kr.(*kmsg.MetadataRequest).Topics {
			if rt.Topic != nil && *rt.Topic == "orders" {
				once.Do(func() { close(listed) }) // this listing goes on and finds no source
				return nil, nil, false
			}
		}
		b.Cluster().KeepControl()
		return nil, nil, false
	})
	created := make(chan error, 1)
	go func() {
		<-listed
		_, err := adm.CreateTopic(ctx, 2, -1, nil, "orders")
		created <- err
	}()

	got, err := retrytopics.Ensure(ctx, adm, ensurePlan(), 0)
	if err != nil {
		t.Fatalf("Ensure with the source created after its first listing: %v; want it found", err)
	}
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if got.Partitions != 2 {
		t.Errorf("Partitions = %d, want the source's 2", got.Partitions)
	}
	for topic, n := range partitions(ctx, t, cl, "orders.retry.1m", "orders.retry.10m", "orders.dlq") {
		if n != 2 {
			t.Errorf("%s: %d partitions, want the source's 2", topic, n)
		}
	}
}
