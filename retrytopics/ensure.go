package retrytopics

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrPartitionMismatch reports a tier or DLQ topic whose partition count
// differs from its source's. kretry refuses to start on it: records keep
// their source partition on every stage, so the counts must be equal.
var ErrPartitionMismatch = errors.New("partition count differs from the source topic")

// ErrNoSource reports a source topic that does not exist.
var ErrNoSource = errors.New("source topic does not exist")

// Topics is what Ensure found or made.
type Topics struct {
	// Partitions is the source's partition count, shared by every stage.
	Partitions int32
	// MaxBytes maps each stage topic to its max.message.bytes (bytes).
	MaxBytes map[string]int
	// Warnings are problems that do not stop kretry (retention.go).
	Warnings []string
}

// Ensure checks the topics of p and creates the missing tiers and DLQ with
// the source's partition count and the source's max.message.bytes plus
// StageHeadroom, so a record that fit the source still fits every stage. When the source is
// missing, Ensure creates it with createSource partitions if createSource is
// positive (the embedded broker) and returns ErrNoSource otherwise. An
// existing stage with another partition count yields ErrPartitionMismatch
// with both counts in the message. extra names further topics to treat like
// the tiers (the parking topic, once it exists).
func Ensure(ctx context.Context, adm *kadm.Client, p *Plan, createSource int32, extra ...string) (*Topics, error) {
	stages := []string{p.DLQ}
	for _, t := range p.Tiers {
		stages = append(stages, t.Topic)
	}
	stages = append(stages, extra...)
	all := append([]string{p.Source}, stages...)

	details, err := adm.ListTopics(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("listing topics %v: %w", all, err)
	}
	if !details.Has(p.Source) {
		if createSource <= 0 {
			return nil, fmt.Errorf("%w: %q (create it, or check the topics[].name spelling)", ErrNoSource, p.Source)
		}
		if _, err := adm.CreateTopic(ctx, createSource, -1, nil, p.Source); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return nil, fmt.Errorf("creating source topic %q: %w", p.Source, err)
		}
		// Past kgo's metadata cache, which would serve the source as
		// unknown for MetadataMinAge (5s by default): kadm issues a
		// direct, uncached metadata request when asked for authorized
		// operations.
		if details, err = adm.ListTopics(kadm.WithAuthorizedOps(ctx), all...); err != nil {
			return nil, fmt.Errorf("listing topics %v: %w", all, err)
		}
	}
	src := details[p.Source]
	if src.Err != nil {
		return nil, fmt.Errorf("source topic %q: %w", p.Source, src.Err)
	}
	parts := int32(len(src.Partitions))

	cfgs, err := adm.DescribeTopicConfigs(ctx, p.Source)
	if err != nil {
		return nil, fmt.Errorf("describing source topic %q: %w", p.Source, err)
	}
	// Stages get the source's max.message.bytes plus StageHeadroom, so a
	// record that fit the source still fits with the kretry header run.
	srcMax := defaultMaxMessageBytes
	srcRetention := kafkaDefaultRetention
	if rc, err := cfgs.On(p.Source, nil); err == nil {
		srcRetention = retentionOf(rc)
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil {
				if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
					srcMax = n
				}
			}
		}
	}
	stageMax := strconv.Itoa(srcMax + StageHeadroom)
	create := map[string]*string{"max.message.bytes": &stageMax}

	var errs []error
	for _, t := range stages {
		d, ok := details[t]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			cc := create
			if t == p.DLQ {
				cc = map[string]*string{"max.message.bytes": &stageMax, "retention.ms": new(dlqRetention(srcRetention, p.DLQRetention))}
			}
			if _, err := adm.CreateTopic(ctx, parts, -1, cc, t); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				errs = append(errs, fmt.Errorf("creating topic %q with %d partitions: %w", t, parts, err))
			}
		case d.Err != nil:
			errs = append(errs, fmt.Errorf("topic %q: %w", t, d.Err))
		case int32(len(d.Partitions)) != parts:
			errs = append(errs, fmt.Errorf("topic %q has %d partitions, source %q has %d: %w (delete it, or name another topic in the config)",
				t, len(d.Partitions), p.Source, parts, ErrPartitionMismatch))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	out := &Topics{Partitions: parts, MaxBytes: make(map[string]int, len(all))}
	rcs, err := adm.DescribeTopicConfigs(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("describing topics %v: %w", all, err)
	}
	for _, rc := range rcs {
		if rc.Name == p.DLQ && details.Has(p.DLQ) {
			if w := retentionWarning(p, srcRetention, retentionOf(rc)); w != "" {
				out.Warnings = append(out.Warnings, w)
			}
		}
		out.MaxBytes[rc.Name] = defaultMaxMessageBytes
		for _, c := range rc.Configs {
			if c.Key == "max.message.bytes" && c.Value != nil {
				if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
					out.MaxBytes[rc.Name] = n
				}
			}
		}
	}
	return out, nil
}

// StageHeadroom is added to the source's max.message.bytes for the tier,
// parking and DLQ topics kretry creates (bytes): room for the kretry header
// run (about 600 bytes plus the error message, itself truncated to fit).
const StageHeadroom = 64 << 10

// defaultMaxMessageBytes is Kafka's default max.message.bytes (bytes).
const defaultMaxMessageBytes = 1048588
