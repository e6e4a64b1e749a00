package retrytopics

import (
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// The DLQ keeps records longer than its source: a record's DLQ copy is
// written long after the original, and an operator needs time to inspect,
// fix and redrive (Amazon SQS gives the same advice for its dead-letter
// queues). MinDLQRetention is the least a DLQ created by kretry keeps
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
				if n < 0 {
					return -1
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
	case d == 0 && src < 0:
		d = -1
	case d == 0:
		d = max(MinDLQRetention, DLQRetentionFactor*src)
	}
	if d < 0 {
		return "-1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}

// retentionWarning is the warning for an existing DLQ that keeps records
// for less time than its source, "" when it does not.
func retentionWarning(p *Plan, src, dlq time.Duration) string {
	if dlq < 0 || (src >= 0 && dlq >= src) {
		return ""
	}
	srcS := "forever"
	if src >= 0 {
		srcS = src.String()
	}
	return fmt.Sprintf("DLQ %q keeps records for %s (retention.ms), less than its source %q (%s): dead-lettered records may expire before anyone redrives them; raise its retention.ms (kafka-configs --alter --add-config retention.ms=…)",
		p.DLQ, dlq, p.Source, srcS)
}
