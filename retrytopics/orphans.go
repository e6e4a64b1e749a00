package retrytopics

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/offsetmap"
	"github.com/kretry/kretry/internal/topicread"
)

// Orphan is a tier topic that the plan no longer names but that still holds
// records its group has not committed past: records moved there under an
// earlier tier list. Nothing consumes it, so they wait there for ever, and
// with ordering key their keys stay blocked behind them.
type Orphan struct {
	Topic   string
	Records int64 // records of committed transactions past the group's commit, summed over partitions
}

// Orphans lists the topics named like a tier of p's source
// ("<source>.retry.*", see TierTopic) that p does not consume and that
// still hold records past group's committed offsets. It counts records,
// read with the client options opts as the engine reads them
// (read_committed, up to the last stable offset): a transaction marker
// after the last record the group took, or a record its commit's metadata
// marks done (internal/offsetmap), is not one. It returns the broker error
// of a listing, offset lookup or read that fails.
func Orphans(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, p *Plan, group string) ([]Orphan, error) {
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	prefix := p.Source + ".retry."
	var candidates []string
	for _, name := range all.Names() {
		if strings.HasPrefix(name, prefix) && p.Stage(name) < 0 && name != p.DLQ {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return nil, nil
	}
	ends, err := adm.ListCommittedOffsets(ctx, candidates...)
	if err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, candidates...)
	if err != nil {
		return nil, err
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, candidates...)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// A group that never committed: Kafka answers with no offsets, the
		// embedded broker with this error.
		committed, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("committed offsets of %s: %w", group, err)
	}
	var out []Orphan
	for _, t := range candidates {
		n, err := countPast(ctx, opts, t, ends, starts, committed)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			out = append(out, Orphan{Topic: t, Records: n})
		}
	}
	return out, nil
}

// countPast counts the records of topic t past the group's committed
// offsets (or from the log start, where there are none) up to the last
// stable offsets ends lists, leaving out those the commit's metadata marks
// done.
func countPast(ctx context.Context, opts []kgo.Opt, t string, ends, starts kadm.ListedOffsets, committed kadm.OffsetResponses) (int64, error) {
	from, to, done := map[int32]int64{}, map[int32]int64{}, map[int32]offsetmap.Map{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Topic != t || o.Err != nil {
			return
		}
		f := int64(0)
		if s, ok := starts.Lookup(t, o.Partition); ok && s.Err == nil {
			f = s.Offset
		}
		if c, ok := committed.Lookup(t, o.Partition); ok && c.Err == nil && c.At >= 0 {
			f = max(f, c.At)
			done[o.Partition], _ = offsetmap.Decode(c.At, c.Metadata)
		}
		from[o.Partition], to[o.Partition] = f, o.Offset
	})
	var n int64
	err := topicread.Range(ctx, opts, t, true, from, to, func(r *kgo.Record) {
		if m, ok := done[r.Partition]; !ok || !m.Done(r.Offset) {
			n++
		}
	})
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", t, err)
	}
	return n, nil
}
