package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/parking"
	"github.com/kretry/kretry/retrytopics"
)

// explainOrder logs, for each key of the ordering key topic that had an
// order violation, what happened to it: every delivery the app saw (when,
// which instance, which attempt, the answer) and every record of the key in
// the parking and tier topics, committed or aborted. It is the evidence an
// order bug is found from.
func (f *faultRun) explainOrder() {
	keys := f.order.ViolatedKeys()
	if len(keys) > 3 {
		keys = keys[:3]
	}
	topic := faultTopics[0].name
	stages := []string{retrytopics.ParkingTopic(topic)}
	for _, tier := range faultTiers {
		d, _ := time.ParseDuration(tier)
		stages = append(stages, retrytopics.TierTopic(topic, d))
	}
	all := map[string][]*kgo.Record{}
	committed := map[string]bool{}
	for _, st := range stages {
		all[st] = f.readStage(st, kgo.ReadUncommitted())
		for _, r := range f.readStage(st, kgo.ReadCommitted()) {
			committed[fmt.Sprintf("%s/%d/%d", st, r.Partition, r.Offset)] = true
		}
	}
	for _, k := range keys {
		var b strings.Builder
		fmt.Fprintf(&b, "order violation of key %s, deliveries (seconds since start):\n", k)
		for _, d := range f.app.deliveries() {
			if d.msg.Topic == topic && string(d.msg.Key) == k {
				fmt.Fprintf(&b, "  %8.3f %-14s attempt %d -> %d  by %s\n", d.at.Sub(f.start).Seconds(), d.msg.ID, d.msg.Attempt, d.status, d.from)
			}
		}
		for _, st := range stages {
			fmt.Fprintf(&b, " %s:\n", st)
			for _, r := range all[st] {
				if string(r.Key) != k {
					continue
				}
				state := "ABORTED"
				if committed[fmt.Sprintf("%s/%d/%d", st, r.Partition, r.Offset)] {
					state = "committed"
				}
				fmt.Fprintf(&b, "  %8.3f p%d@%d %-9s %s\n", r.Timestamp.Sub(f.start).Seconds(), r.Partition, r.Offset, state, describeStageRecord(r))
			}
		}
		f.t.Log(b.String())
	}
}

// describeStageRecord names a parking op, or the origin of a parked or
// tier record.
func describeStageRecord(r *kgo.Record) string {
	if op, ok := parking.ParseOp(r); ok {
		return fmt.Sprintf("op %s %q %s", op.Kind, op.Ref, op.Origin)
	}
	o, err := retrytopics.ReadOrigin(r, false, 0)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return fmt.Sprintf("record %s attempts %d", o.ID(), o.Attempts)
}

// readStage reads topic from its start with the isolation level given
// until no record came for two seconds.
func (f *faultRun) readStage(topic string, level kgo.IsolationLevel) []*kgo.Record {
	cl := newClient(f.t, f.addrs[0], kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(level),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(500*time.Millisecond))
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := len(out)
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
		if len(out) == n {
			break
		}
	}
	slices.SortFunc(out, func(a, b *kgo.Record) int { return a.Timestamp.Compare(b.Timestamp) })
	return out
}
