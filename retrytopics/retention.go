package retrytopics

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// The DLQ keeps records longer than its source: a record's DLQ copy is
// written long after the original, and an operator needs time to inspect,
// fix and redrive (Amazon SQS gives the same advice for its dead-letter
// queues). The parking topic is created the same way: its records wait
// for as long as their key is blocked, which a held key or a long outage
// makes open-ended. A tier keeps records at least as long as its source
// (14 days when the source keeps them forever), and twice its longest
// wait (retention counts from the move). MinDLQRetention is the least a DLQ created by kretry keeps
// records when Plan.DLQRetention is 0; DLQRetentionFactor times the
// source's retention.ms when that is longer.
const (
	MinDLQRetention    = 14 * 24 * time.Hour
	DLQRetentionFactor = 2
)

// kafkaDefaultRetention is Kafka's default retention.ms (7 days).
const kafkaDefaultRetention = 7 * 24 * time.Hour

// retentionOf reads retention.ms from a topic's configs: -1 means forever;
// absent means Kafka's default.
func retentionOf(rc kadm.ResourceConfig) time.Duration {
	for _, c := range rc.Configs {
		if c.Key == "retention.ms" && c.Value != nil {
			if n, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
				if n < 0 || n > math.MaxInt64/int64(time.Millisecond) {
					return -1 // past time.Duration's 292 years: forever
				}
				return time.Duration(n) * time.Millisecond
			}
		}
	}
	return kafkaDefaultRetention
}

// dlqRetention is the retention.ms value to create the DLQ with, for a
// source that keeps records for src (-1: forever) and a configured
// retention (0: derived, -1: forever).
func dlqRetention(src, configured time.Duration) string {
	d := configured
	switch {
	case d == 0 && twice(src) < 0: // forever, or past time.Duration
		d = -1
	case d == 0:
		d = max(MinDLQRetention, twice(src))
	}
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// stageRetention is the retention.ms value to create stage topic t of p
// with: the DLQ's (dlqRetention), a tier's (tierRetention), and for any
// other stage, the parking topic, the DLQ's default.
func stageRetention(p *Plan, t string, src time.Duration) string {
	switch i := p.Stage(t); {
	case t == p.DLQ:
		return dlqRetention(src, p.DLQRetention)
	case i > 0:
		return tierRetention(p, i-1, src)
	}
	return dlqRetention(src, 0)
}

// stageRetentionWarning is the warning for existing stage topic t of p
// that keeps records for r, too short for what it holds; "" when not.
func stageRetentionWarning(p *Plan, t string, src, r time.Duration) string {
	switch i := p.Stage(t); {
	case t == p.DLQ && p.DLQRetention != 0 && r.Milliseconds() == p.DLQRetention.Milliseconds():
		return "" // as topics[].dlq.retention asks
	case t == p.DLQ:
		return retentionWarning(p, src, r)
	case i > 0:
		return tierRetentionWarning(p, i-1, r)
	case i < 0:
		return parkingRetentionWarning(p, t, src, r)
	}
	return ""
}

// tierRetention is the retention.ms value to create tier i of p with, for
// a source that keeps records for src (-1: forever): the source's, and at
// least twice the tier's longest wait, rounded up to the millisecond (so
// that tierRetentionWarning does not find it a nanosecond short). From a
// source kept forever a tier takes MinDLQRetention instead: its records
// are consumed within their wait, and kept forever they would only fill
// the disk.
func tierRetention(p *Plan, i int, src time.Duration) string {
	w := twice(p.LongestDelay(i))
	switch {
	case w < 0:
		return "-1"
	case src < 0:
		src = MinDLQRetention
	}
	return strconv.FormatInt(ceilMs(max(src, w)), 10)
}

// ceilMs is d in milliseconds, rounded up.
func ceilMs(d time.Duration) int64 {
	ms := d.Milliseconds()
	if d%time.Millisecond > 0 {
		ms++
	}
	return ms
}

// tierRetentionWarning is the warning for an existing tier i of p that
// keeps records for less than twice its longest wait, "" when it does not.
func tierRetentionWarning(p *Plan, i int, tier time.Duration) string {
	wait := p.LongestDelay(i)
	if w := twice(wait); tier < 0 || (w >= 0 && tier >= w) {
		return ""
	}
	return fmt.Sprintf("tier %q keeps records for %s (retention.ms), less than twice its longest wait (%s): a record waiting in it, or behind a backlog, may be deleted before it is delivered, and is then lost; raise its retention.ms (kafka-configs --alter --add-config retention.ms=…)",
		p.Tiers[i].Topic, tier, wait)
}

// parkingRetentionWarning is the warning for an existing parking topic
// that keeps records for less time than the source, "" when it does not.
func parkingRetentionWarning(p *Plan, topic string, src, parking time.Duration) string {
	if parking < 0 || (src >= 0 && parking >= src) {
		return ""
	}
	return fmt.Sprintf("parking topic %q keeps records for %s (retention.ms), less than its source %q (%s): a key blocked longer (held by on_dead_letter: hold, or parked through a long outage) loses its parked records; raise its retention.ms (kafka-configs --alter --add-config retention.ms=…)",
		topic, parking, p.Source, forever(src))
}

// twice is DLQRetentionFactor × d; -1 (forever) for a negative d, and past
// time.Duration's range instead of overflowing.
func twice(d time.Duration) time.Duration {
	if d < 0 || d > math.MaxInt64/DLQRetentionFactor {
		return -1
	}
	return DLQRetentionFactor * d
}

func forever(d time.Duration) string {
	if d < 0 {
		return "forever"
	}
	return d.String()
}

// retentionWarning is the warning for an existing DLQ that keeps records
// for less time than its source, "" when it does not.
func retentionWarning(p *Plan, src, dlq time.Duration) string {
	if dlq < 0 || (src >= 0 && dlq >= src) {
		return ""
	}
	return fmt.Sprintf("DLQ %q keeps records for %s (retention.ms), less than its source %q (%s): dead-lettered records may expire before anyone redrives them; raise its retention.ms (kafka-configs --alter --add-config retention.ms=…)",
		p.DLQ, dlq, p.Source, forever(src))
}
