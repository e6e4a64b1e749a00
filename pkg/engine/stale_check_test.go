package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/retrytopics"
)

// hop identifies one copy of one move: the original record and the number
// of deliveries behind it.
func hopOf(r *kgo.Record) string {
	tp, _ := header(r, retrytopics.HeaderOriginalTopic)
	p, _ := header(r, retrytopics.HeaderOriginalPartition)
	o, _ := header(r, retrytopics.HeaderOriginalOffset)
	a, _ := header(r, retrytopics.HeaderAttempt)
	return tp + "/" + p + "/" + o + "#" + a
}

// checkPlaces checks, on the committed data after a drained run, that no
// stage holds two copies of one hop (a tier) or of one record (the DLQ), and
// that the group's committed offset of each source and tier partition is
// past its every record (the run drained, so nothing may be left behind a
// commit: a record at or past it is delivered again by the next owner).
func checkPlaces(t *testing.T, e *env, group string) (dups int) {
	t.Helper()
	for _, topic := range append(tierTopics(e), e.plan.DLQ) {
		seen := map[string][]string{}
		for _, r := range readTopic(t, e, topic) {
			k := hopOf(r)
			if topic == e.plan.DLQ {
				k, _, _ = strings.Cut(k, "#")
			}
			seen[k] = append(seen[k], fmt.Sprintf("%d/%d", r.Partition, r.Offset))
		}
		for k, at := range seen {
			if len(at) > 1 {
				dups++
				t.Errorf("%s holds %d copies of %s, at %v", topic, len(at), k, at)
			}
		}
	}
	// A tier record acknowledged, its release committed, and delivered
	// again from the tier (a stale copy) writes its release op twice.
	if parking := retrytopics.ParkingTopic(e.plan.Source); parking != "" {
		ops := map[string][]int64{}
		for _, r := range readTopic(t, e, parking) {
			if op, ref, origin, ok := opOf(r); ok && (op == opRelease || op == opBlock) && origin == "" {
				k := fmt.Sprintf("%d %s %s", r.Partition, op, ref)
				ops[k] = append(ops[k], r.Offset)
			}
		}
		for k, at := range ops {
			if len(at) > 1 {
				dups++
				t.Errorf("parking holds %d committed ops %q, at offsets %v: a move was committed twice", len(at), k, at)
			}
		}
	}
	offs, err := e.adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range append([]string{e.plan.Source}, tierTopics(e)...) {
		for _, r := range e.recordsAfterCommit(group, topic) {
			o, _ := offs.Lookup(topic, r.Partition)
			t.Errorf("%s/%d/%d (%s) is at or past the group's committed offset %d after the run drained", topic, r.Partition, r.Offset, hopOf(r), o.At)
		}
	}
	return dups
}

// readTopic returns every committed record of topic, read with
// read_committed from the start up to each partition's end offset.
func readTopic(t *testing.T, e *env, topic string) []*kgo.Record {
	t.Helper()
	ends, err := e.adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	start := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			start[o.Partition] = kgo.NewOffset().AtStart()
			left[o.Partition] = o.Offset
		}
	})
	if len(start) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(5 * time.Second)
	for len(left) > 0 && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			for _, r := range p.Records {
				out = append(out, r)
			}
			// The end offset may be a control record's: the
			// partition is read once the high watermark is reached.
			if end, ok := left[p.Partition]; ok && p.HighWatermark >= end && (len(p.Records) == 0 || p.Records[len(p.Records)-1].Offset+2 >= end) {
				delete(left, p.Partition)
			}
		})
	}
	return out
}

func tierTopics(e *env) []string {
	var out []string
	for _, t := range e.plan.Tiers {
		out = append(out, t.Topic)
	}
	return out
}
