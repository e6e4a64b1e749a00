package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/kafkatest"
)

// newClient returns a franz-go client for addr, closed at the end of the
// test.
func newClient(t *testing.T, addr string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates topic with the given partition count.
func createTopic(t *testing.T, addr, topic string, partitions int32) {
	t.Helper()
	adm := newAdmin(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		t.Fatalf("creating %s: %v", topic, err)
	}
	if err := kafkatest.WaitTopics(ctx, adm, topic); err != nil {
		t.Fatal(err)
	}
}

// newAdmin returns an admin client for addr that refreshes its metadata
// at most every 50ms (the default, 5s, would keep a topic created by the
// kretry subprocess unknown to the test for seconds).
func newAdmin(t *testing.T, addr string) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newClient(t, addr, kgo.MetadataMinAge(50*time.Millisecond)))
}

// endOffset returns the sum of the high watermarks of topic's partitions
// (0 while the topic does not exist).
func endOffset(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	offs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

// produceSync produces rs and returns the CloudEvents id of each, in order.
func produceSync(t *testing.T, cl *kgo.Client, rs ...*kgo.Record) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = id(r.Topic, r.Partition, r.Offset)
	}
	return ids
}

// sentinelHeader marks the records topicReader.sync writes to find the end
// of a topic; they are never returned as records.
const sentinelHeader = "e2e-sentinel"

// topicReader consumes one topic from the start, read_committed, for the
// whole test. A read_committed consumer cannot tell from its records alone
// that it has seen everything committed (the log may end in aborted
// records or transaction markers), so sync writes a sentinel record to
// every partition and waits until it has read all of them: everything
// committed before the sentinels has then been read.
type topicReader struct {
	topic string
	addr  string

	mu        sync.Mutex
	recs      []*kgo.Record
	sentinels map[string]bool
	onRecord  func(*kgo.Record)
}

// readTopic starts reading topic. onRecord, when set, is called for every
// record (not for sentinels) from the reading goroutine.
func readTopic(t *testing.T, addr, topic string, onRecord func(*kgo.Record)) *topicReader {
	t.Helper()
	r := &topicReader{topic: topic, addr: addr, sentinels: map[string]bool{}, onRecord: onRecord}
	cl := newClient(t, addr,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond),
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			fs.EachRecord(r.add)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *topicReader) add(rec *kgo.Record) {
	for _, h := range rec.Headers {
		if h.Key == sentinelHeader {
			r.mu.Lock()
			r.sentinels[string(h.Value)] = true
			r.mu.Unlock()
			return
		}
	}
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	if r.onRecord != nil {
		r.onRecord(rec)
	}
}

// records returns the records read so far.
func (r *topicReader) records() []*kgo.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*kgo.Record(nil), r.recs...)
}

// sync waits until every record committed to the topic before the call has
// been read, and returns all records read.
func (r *topicReader) sync(t *testing.T) []*kgo.Record {
	t.Helper()
	adm := newAdmin(t, r.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, r.topic)
	if err != nil || td[r.topic].Err != nil {
		t.Fatalf("listing %s: %v %v", r.topic, err, td[r.topic].Err)
	}
	cl := newClient(t, r.addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var tokens []string
	var rs []*kgo.Record
	for p := range td[r.topic].Partitions {
		tok := fmt.Sprintf("%d-%d", time.Now().UnixNano(), p)
		tokens = append(tokens, tok)
		rs = append(rs, &kgo.Record{Topic: r.topic, Partition: p, Headers: []kgo.RecordHeader{{Key: sentinelHeader, Value: []byte(tok)}}})
	}
	produceSync(t, cl, rs...)
	waitFor(t, 20*time.Second, "the sentinels on "+r.topic, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, tok := range tokens {
			if !r.sentinels[tok] {
				return false
			}
		}
		return true
	})
	return r.records()
}

// header returns the value of the first header named key, and whether
// there is one.
func header(rec *kgo.Record, key string) (string, bool) {
	for _, h := range rec.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// requireKcat skips the test where kcat is not installed.
func requireKcat(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed: apt-get install kcat")
	}
	return path
}

// runKcat runs kcat with stdin and returns its stdout; it fails the test
// on a non-zero exit.
func runKcat(t *testing.T, kcat, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

// kcatRecord is one line of `kcat -C -J`.
type kcatRecord struct {
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Headers   []*string `json:"headers"` // name, value, name, value, …
	Key       *string   `json:"key"`
	Payload   *string   `json:"payload"`
}

// parseKcatJSON parses the output of `kcat -C -J`, one object a line.
func parseKcatJSON(t *testing.T, out string) []kcatRecord {
	t.Helper()
	var rs []kcatRecord
	for line := range strings.Lines(out) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("kcat -J line %q: %v", line, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// dumpStages logs, for diagnosis, the group's committed offsets and every
// record of the stage topics of source (tiers, parking, DLQ), read
// read_committed and read_uncommitted by kcat. It writes nothing, so it is
// safe while kretry runs; it does nothing without kcat.
func dumpStages(t *testing.T, addr, source string) {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Log("dumpStages: kcat not installed")
		return
	}
	adm := newAdmin(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if offs, err := adm.FetchOffsets(ctx, source+"-kretry"); err == nil {
		var b strings.Builder
		offs.Each(func(o kadm.OffsetResponse) { fmt.Fprintf(&b, " %s/%d@%d", o.Topic, o.Partition, o.At) })
		t.Logf("dumpStages: committed offsets of %s-kretry:%s", source, b.String())
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Logf("dumpStages: %v", err)
		return
	}
	for _, topic := range topics.Names() {
		if !strings.HasPrefix(topic, source+".") {
			continue
		}
		for _, iso := range []string{"read_committed", "read_uncommitted"} {
			cmd := exec.CommandContext(ctx, kcat, "-C", "-b", addr, "-t", topic, "-o", "beginning", "-e", "-q",
				"-X", "isolation.level="+iso, "-f", "%t/%p/%o key=%k value=%s headers=%h\n")
			out, err := cmd.Output()
			t.Logf("dumpStages: %s (%s, err %v):\n%s", topic, iso, err, out)
		}
	}
}
