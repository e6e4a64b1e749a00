package retrytopics

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Orphan is a tier topic that the plan no longer names but that still holds
// records its group has not committed past: records moved there under an
// earlier tier list. Nothing consumes it, so they wait there for ever, and
// with ordering key their keys stay blocked behind them.
type Orphan struct {
	Topic   string
	Records int64 // end offset minus committed offset (or log start), summed over partitions; transaction markers count
}

// Orphans lists the topics named like a tier of p's source
// ("<source>.retry.*", see TierTopic) that p does not consume and that
// still hold records past group's committed offsets. It returns the broker
// error of a listing or offset lookup that fails.
func Orphans(ctx context.Context, adm *kadm.Client, p *Plan, group string) ([]Orphan, error) {
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
	ends, err := adm.ListEndOffsets(ctx, candidates...)
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
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic != t || o.Err != nil {
				return
			}
			from := int64(0)
			if s, ok := starts.Lookup(t, o.Partition); ok && s.Err == nil {
				from = s.Offset
			}
			if c, ok := committed.Lookup(t, o.Partition); ok && c.Err == nil && c.At >= 0 {
				from = max(from, c.At)
			}
			n += max(o.Offset-from, 0)
		})
		if n > 0 {
			out = append(out, Orphan{Topic: t, Records: n})
		}
	}
	return out, nil
}
