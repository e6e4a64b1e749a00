package lag

import (
	"time"

	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/flow"
)

// Stage names (flow.Stage), as the rows, the metrics and the engine's
// Observer events spell them. A tier is "tier-1", "tier-2", … (see
// TierStage).
const (
	StageSource  = string(flow.StageSource)
	StageParking = string(flow.StageParking)
	StageDLQ     = string(flow.StageDLQ)
)

// TierStage names tier i (1-based): "tier-1", "tier-2", … (flow.TierStage).
func TierStage(i int) string { return string(flow.TierStage(i)) }

// Defaults used where a Config field is zero.
const (
	DefaultInterval = 30 * time.Second
	DefaultTimeout  = 10 * time.Second
	DefaultWindow   = 10
)

// Config says what a Monitor scans and how often.
type Config struct {
	// Groups are the consumer groups to scan.
	Groups []Group
	// DLQs are the dead-letter topics whose waiting records are counted.
	DLQs []DLQ
	// DLQGroup, when set, is a group that drains the DLQs: records wait
	// from its committed offset on. "" counts from the log start.
	DLQGroup string
	// Interval between scans in Run (default 30s).
	Interval time.Duration
	// Timeout bounds each broker call of a scan (default 10s): the offset
	// fetch, the group description, the metadata, the offset listings and
	// the whole record fetch for the ages.
	Timeout time.Duration
	// Window is the number of scans the status looks back over (default
	// 10, at least 2).
	Window int
	// PerPartition exports one series per partition; false aggregates the
	// lag, age and status series per topic.
	PerPartition bool
}

// Group is one consumer group to scan.
type Group struct {
	Name string
	// ReadCommitted: the group reads with isolation.level read_committed,
	// so its lag ends at the last stable offset, not the high watermark.
	// kretry's own groups read committed.
	ReadCommitted bool
	// Topics the group is expected to consume. Every partition of these
	// gets a row, also before the group commits (flagged NoCommit). Rows
	// of other topics come from the group's commits and its members'
	// assignments, so that Topics may be empty for a foreign group.
	Topics []Topic
}

// Topic is one topic of a kretry pipeline, consumed by the pipeline's
// group.
type Topic struct {
	Name string
	// Source is the pipeline's source topic; Stage is StageSource, a tier
	// ("tier-1", …) or StageParking.
	Source, Stage string
	// Wait is how long a record may wait in the topic by design: a tier's
	// delay stretched by the jitter, for parking the sum of the tiers. A
	// committed offset that stands still is no stall while the oldest
	// record has waited less than Wait plus the status window. 0 for the
	// source.
	Wait time.Duration
}

// DLQ is one dead-letter topic.
type DLQ struct {
	Topic  string
	Source string
}

func (c *Config) setDefaults() {
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Window < 2 {
		c.Window = DefaultWindow
	}
}

// FromConfig derives the Monitor's Config from a loaded (defaulted and
// validated) kretry config: per configured topic, its group reading
// committed the stages of the topic's plan (config.Topic.Plan, the one the
// engine runs: the source and each tier, whose Wait is the tier's longest
// jittered delay, retrytopics.Plan.LongestDelay) and, when the ordering
// parks, its parking topic, whose Wait is the sum of the tiers' (a parked
// record waits for its key's head to pass them all; with on_dead_letter
// hold it waits for an operator, which the status reports as a stall on
// purpose); its DLQ; the further groups of lag.groups; and lag.interval,
// lag.timeout, lag.window, lag.dlq_group and metrics.per_partition.
func FromConfig(c *config.Config) Config {
	out := Config{
		DLQGroup:     c.Lag.DLQGroup,
		Interval:     c.Lag.Interval,
		Timeout:      c.Lag.Timeout,
		Window:       c.Lag.Window,
		PerPartition: c.Metrics.PerPartition,
	}
	for _, t := range c.Topics {
		plan := t.Plan()
		g := Group{Name: t.Group, ReadCommitted: true}
		g.Topics = append(g.Topics, Topic{Name: plan.Source, Source: plan.Source, Stage: StageSource})
		var total time.Duration
		for i, tier := range plan.Tiers {
			wait := plan.LongestDelay(i)
			total += wait
			g.Topics = append(g.Topics, Topic{Name: tier.Topic, Source: plan.Source, Stage: TierStage(i + 1), Wait: wait})
		}
		if t.Ordering.Parks() {
			g.Topics = append(g.Topics, Topic{Name: t.Parking.Topic, Source: plan.Source, Stage: StageParking, Wait: total})
		}
		out.Groups = append(out.Groups, g)
		out.DLQs = append(out.DLQs, DLQ{Topic: plan.DLQ, Source: plan.Source})
	}
	for _, g := range c.Lag.Groups {
		out.Groups = append(out.Groups, Group{Name: g.Name, ReadCommitted: g.ReadCommitted})
	}
	return out
}
