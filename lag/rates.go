package lag

import (
	"cmp"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// Pipeline is one kretry pipeline (a group and its source topic) as two
// scans saw it: the overload signals that the brokers hold (issue 11;
// docs/METRICS.md "kretry lag"). Rates are in offsets per second over
// the time between the scans; they count transaction markers as records,
// as lag does, so on kretry's transactional tiers and DLQs they are an
// upper bound.
type Pipeline struct {
	Group  string `json:"group"`
	Source string `json:"source"`
	// Lag is the group's lag over the source and its tiers, in offsets;
	// Oldest the age of the oldest record waiting there (AgeKnown false
	// when a lagging partition's age could not be read).
	Lag      int64         `json:"lag"`
	Oldest   time.Duration `json:"-"`
	AgeKnown bool          `json:"age_known"`
	// Enqueue is how fast the source's end offset moved (records
	// produced), Drain how fast the group's committed offset there moved
	// (records taken off it: delivered, or moved on), per second.
	Enqueue float64 `json:"enqueue_per_second"`
	Drain   float64 `json:"drain_per_second"`
	// ToTiers is how fast the tiers' end offsets moved (records moved to
	// a retry tier), ToDLQ the DLQ's (records dead-lettered), per second.
	ToTiers float64 `json:"to_tiers_per_second"`
	ToDLQ   float64 `json:"to_dlq_per_second"`
	// Interval is the time between the two scans; RatesKnown is false
	// without a previous scan, or when a partition of the pipeline could
	// not be measured in either, or moved backwards (a recreated topic).
	Interval   time.Duration `json:"-"`
	RatesKnown bool          `json:"rates_known"`
}

type pipeKey struct{ group, source string }

// position sums one pipeline's offsets in one scan.
type position struct {
	sourceEnd, committed, tierEnd, dlqEnd int64
	lag                                   int64
	oldest                                time.Duration
	ageKnown, partial                     bool
}

func positions(s *Snapshot) map[pipeKey]*position {
	ps := map[pipeKey]*position{}
	dlqEnd := map[string]int64{} // by source
	dlqPartial := map[string]bool{}
	for _, r := range s.DLQ {
		if r.Error != "" {
			dlqPartial[r.Source] = true
		}
		dlqEnd[r.Source] += r.End
	}
	for _, r := range s.Rows {
		if r.Stage == "" || r.Stage == StageParking {
			continue // a foreign group's, or parking (bookkeeping records)
		}
		k := pipeKey{r.Group, r.Source}
		p := ps[k]
		if p == nil {
			p = &position{ageKnown: true, dlqEnd: dlqEnd[r.Source], partial: dlqPartial[r.Source]}
			ps[k] = p
		}
		if r.Error != "" {
			p.partial = true
			continue
		}
		p.lag += r.Lag
		if r.Lag > 0 {
			p.ageKnown = p.ageKnown && r.AgeKnown
			p.oldest = max(p.oldest, r.Age)
		}
		switch {
		case r.Stage == StageSource:
			p.sourceEnd += r.End
			p.committed += max(r.Committed, 0)
		case strings.HasPrefix(r.Stage, "tier-"):
			p.tierEnd += r.End
		}
	}
	return ps
}

// Pipelines returns kretry's pipelines in cur, sorted by source and
// group, with the rates since prev (nil for none: RatesKnown false).
func Pipelines(prev, cur *Snapshot) []Pipeline {
	now := positions(cur)
	var before map[pipeKey]*position
	var dt time.Duration
	if prev != nil {
		before, dt = positions(prev), cur.Time.Sub(prev.Time)
	}
	out := make([]Pipeline, 0, len(now))
	for k, p := range now {
		pl := Pipeline{Group: k.group, Source: k.source, Lag: p.lag, Oldest: p.oldest, AgeKnown: p.ageKnown, Interval: dt}
		if b, ok := before[k]; ok && dt > 0 && !p.partial && !b.partial {
			d := []int64{p.sourceEnd - b.sourceEnd, p.committed - b.committed, p.tierEnd - b.tierEnd, p.dlqEnd - b.dlqEnd}
			if slices.Min(d) >= 0 {
				sec := dt.Seconds()
				pl.Enqueue, pl.Drain, pl.ToTiers, pl.ToDLQ = float64(d[0])/sec, float64(d[1])/sec, float64(d[2])/sec, float64(d[3])/sec
				pl.RatesKnown = true
			}
		}
		out = append(out, pl)
	}
	slices.SortFunc(out, func(a, b Pipeline) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Group, b.Group))
	})
	return out
}

// MarshalJSON writes the pipeline with oldest_seconds and
// interval_seconds, and the rates only when known.
func (p Pipeline) MarshalJSON() ([]byte, error) {
	type plain Pipeline
	v := struct {
		plain
		OldestSeconds   float64  `json:"oldest_seconds"`
		IntervalSeconds float64  `json:"interval_seconds,omitempty"`
		Enqueue         *float64 `json:"enqueue_per_second,omitempty"`
		Drain           *float64 `json:"drain_per_second,omitempty"`
		ToTiers         *float64 `json:"to_tiers_per_second,omitempty"`
		ToDLQ           *float64 `json:"to_dlq_per_second,omitempty"`
	}{plain: plain(p), OldestSeconds: p.Oldest.Seconds(), IntervalSeconds: p.Interval.Seconds()}
	if p.RatesKnown {
		v.Enqueue, v.Drain, v.ToTiers, v.ToDLQ = &p.Enqueue, &p.Drain, &p.ToTiers, &p.ToDLQ
	}
	return json.Marshal(v)
}
