// Package lag owns kretry's lag monitor: for every monitored consumer group
// and partition it measures the committed offset, the log start, the end
// offset, the lag between them and the age of the next record to consume;
// it judges each partition's status over a window of scans; and it exports
// the latest scan as OpenTelemetry gauges. `kretry run` runs a Monitor
// beside the engines, `kretry lag` prints one scan (or one per interval).
//
//	m, err := lag.New(cl, lag.FromConfig(cfg), lag.WithLogger(l), lag.WithMeterProvider(mp))
//	go m.Run(ctx)         // a scan every cfg.Lag.Interval
//	snap, err := m.Scan(ctx) // or one scan now
//
// # What is monitored
//
// kretry's own groups (topics[].group), each reading committed its source
// topic, its retry tiers and, with ordering key or partition, its parking
// topic: every partition of these is reported, also before the group
// commits. The groups of lag.groups (the app's own, say): the partitions
// they committed to or are assigned. The dead-letter topics: the records
// waiting in them. A partition is reported only while its topic exists, so
// the series of a deleted topic, a partition gone with a recreated topic,
// or a deleted foreign group disappear at the next scan.
//
// # Lag
//
// lag = end − committed, in offsets (see Compute), where end is the last
// stable offset for groups that read committed (kretry's, and lag.groups
// entries with read_committed) and the high watermark otherwise, so that
// the records of a transaction still open are no lag to a group that
// cannot read them yet. The edge cases:
//
//   - no committed offset: lag from the log start, flagged NoCommit (the
//     group has not consumed the partition yet);
//   - committed offset below the log start (retention deleted records the
//     group never read): lag from the log start, flagged Clamped;
//   - committed offset past the end (a topic recreated under its group's
//     commits, a manual commit): 0, flagged PastEnd, never negative;
//   - a tail of transaction markers: a transactional consumer that read the
//     last record of a transaction commits that record's offset + 1, which
//     is the commit marker's offset, so end − committed stays 1 when it is
//     caught up. The last stable offset does not help (it is past the
//     marker), so the monitor reads the tail: when between the committed
//     offset and end there are only control records and, for groups that
//     read committed, aborted records, the lag is 0 (flagged MarkersOnly).
//     Markers inside a lagging range still count as offsets: lag counts
//     offsets, which equal records only on topics without transactions.
//   - an empty group (no members) that still has commits: measured like
//     any other; its lag grows while records arrive, and its status turns
//     STOP.
//   - kretry's own commits: the engine commits the offset of its first
//     record not done, with metadata naming the records past it still
//     pending (internal/offsetmap; pkg/engine progress.go). The offsets
//     past the committed one that the metadata marks done are not lag
//     (Flags.DoneAhead). The age stays that of the record at the committed
//     offset, the oldest not done; the drain rate, which follows the
//     committed offset, stands still while that record is in delivery.
//
// # Age
//
// A partition's age is how long the next record to consume has been in
// the log: the scan's start time minus the timestamp of the first record at
// or after the committed offset (at or after the log start without a
// commit), 0 when the lag is 0. The timestamp is the producer's CreateTime
// unless the topic uses LogAppendTime; a producer clock that runs ahead
// gives an age of 0, not a negative one. For kretry's own stages this is
// the age of the oldest waiting record: a record moved to a tier or to
// parking carries the move time as its timestamp (retrytopics), and the
// group's committed offset in a tier is the oldest record not yet
// delivered. For a DLQ, which no kretry group consumes, the waiting records
// are those from lag.dlq_group's committed offset, or from the log start
// when no such group is configured (records then wait until retention
// removes them), to the last stable offset (DLQ writes are transactional);
// the age is that of the first of them.
//
// The records are read with raw Fetch requests, one per partition leader
// and isolation level carrying every lagging partition, decoded with
// kgo.ProcessFetchPartition. A request names each partition once, so
// groups at different offsets of one partition may take a further round
// (at most 8 per scan). A result is cached per topic ID, partition and
// offset: a commit that did not move costs no fetch at the next scan. A
// record not read within the scan's timeout leaves the age unknown
// (AgeKnown false; no age series for that scan).
//
// # Status
//
// Each partition of a group gets a status from the samples of its last
// Window scans (committed offset, lag), in the spirit of Burrow's
// evaluation; Evaluate documents the rules. OK, WARN (falling behind: the
// group commits but its lag only grew over the window), STALL (a live
// member holds the partition but its commit stood still, with lag, for the
// window), STOP (the same without a member holding it: the group is empty
// or the partition unassigned), ERR (the scan could not measure it). Two
// faults of Burrow's are avoided: the lag is measured against each scan's
// end offset, so it keeps growing when commits stop instead of freezing
// at the last commit's value; and a partition whose lag is 0 is OK however
// long ago its group committed, so an idle topic is no false STOP. Retry
// tiers and parking hold records by design: a commit standing still there
// is OK while the oldest record has waited no longer than the topic's Wait
// plus the window's span. A Retry-After longer than the tier's delay
// stretches a record's wait past that and may show as STALL.
//
// The window needs Window scans before it judges movement, so STOP and
// STALL come Window × Interval after the fact at the earliest; choose
// Window × Interval longer than the longest commit interval of a
// monitored group.
//
// # Time to drain
//
// Each row also carries its DrainRate, the consume rate over the status
// window (records per second the committed offset moved), and TimeToDrain,
// lag ÷ that rate in seconds: 0 when caught up, +Inf when lagging with a
// rate of 0. It ignores records arriving meanwhile; docs/METRICS.md gives
// its limits.
//
// # Requests
//
// A scan sends, each under Config.Timeout: one OffsetFetch for all groups
// and one DescribeGroups (per group coordinator); one Metadata (that never
// creates a topic); per partition leader one ListOffsets for the log start
// offsets, one for the high watermarks and one for the last stable offsets
// (a ListOffsets asks one offset per partition and has one isolation level,
// so three kinds take three requests, sent together); then the record
// fetch. No request is per partition.
//
// kadm's Lag and CalculateGroupLag are not used for the arithmetic:
// they measure against the high watermark only (no last stable offset),
// do not clamp a commit below the log start, report for a group with
// members only the partitions assigned to them (dropping committed but
// unassigned ones), and every kadm List*Offsets call issues its own
// Metadata request first. kadm's FetchManyOffsets (one batched
// OffsetFetch) and DescribeGroups are used as they are.
//
// # Metrics
//
// WithMeterProvider exports the latest scan as observable gauges, named
// and attributed after the OpenTelemetry messaging conventions where they
// have a name (messaging.consumer.group.name, messaging.destination.name,
// messaging.destination.partition.id, error.type) and under kretry.*
// otherwise; docs/METRICS.md lists them with their units. Config
// PerPartition false aggregates them per topic to bound cardinality.
package lag
