package retrytopics

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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
	// CreatedSource is true when the source was missing and Ensure
	// created it (createSource > 0: the embedded broker), so a mistyped
	// name can be told from the topic the records are on.
	CreatedSource bool
}

// Ensure checks the topics of p and creates the missing tiers and DLQ with
// the source's partition count and the source's max.message.bytes plus
// StageHeadroom, so a record that fit the source still fits every stage. When the source is
// missing, Ensure creates it with createSource partitions if createSource is
// positive (the embedded broker) and otherwise returns ErrNoSource once it
// has looked again for SourceGrace. An
// existing stage with another partition count yields ErrPartitionMismatch
// with both counts in the message. extra names further topics whose
// records wait for a release (the parking topic): created with the DLQ's
// default retention, and a warning when one that exists keeps records for
// less time than the source.
func Ensure(ctx context.Context, adm *kadm.Client, p *Plan, createSource int32, extra ...string) (*Topics, error) {
	stages := []string{p.DLQ}
	for _, t := range p.Tiers {
		stages = append(stages, t.Topic)
	}
	stages = append(stages, extra...)
	all := append([]string{p.Source}, stages...)

	details, createdSource, err := ensureSource(ctx, adm, p.Source, createSource, all)
	if err != nil {
		return nil, err
	}
	parts := int32(len(details[p.Source].Partitions))
	srcMax, srcRetention, err := sourceLimits(ctx, adm, p.Source)
	if err != nil {
		return nil, err
	}
	created, err := createStages(ctx, adm, p, details, stages, parts, srcMax, srcRetention)
	if err != nil {
		return nil, err
	}
	if err := waitServed(ctx, adm, parts, created); err != nil {
		return nil, err
	}
	topics, err := describeStages(ctx, adm, p, details, all, parts, srcRetention)
	if err != nil {
		return nil, err
	}
	topics.CreatedSource = createdSource
	return topics, nil
}

// ensureSource lists all (the source first) and creates the source with
// createSource partitions when it is missing, saying whether it did. When
// createSource is 0 it looks again for SourceGrace (lookAgain) before
// ErrNoSource.
func ensureSource(ctx context.Context, adm *kadm.Client, source string, createSource int32, all []string) (kadm.TopicDetails, bool, error) {
	details, err := adm.ListTopics(ctx, all...)
	if err != nil {
		return nil, false, fmt.Errorf("listing topics %v: %w", all, err)
	}
	if !details.Has(source) && createSource <= 0 {
		if details, err = lookAgain(ctx, adm, source, all); err != nil {
			return nil, false, err
		}
	}
	created := false
	if !details.Has(source) {
		_, err := adm.CreateTopic(ctx, createSource, -1, nil, source)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return nil, false, fmt.Errorf("creating source topic %q: %w", source, err)
		}
		created = err == nil
		// Past kgo's metadata cache, which would serve the source as
		// unknown for MetadataMinAge (5s by default): kadm issues a
		// direct, uncached metadata request when asked for authorized
		// operations.
		if details, err = adm.ListTopics(kadm.WithAuthorizedOps(ctx), all...); err != nil {
			return nil, false, fmt.Errorf("listing topics %v: %w", all, err)
		}
	}
	if err := details[source].Err; err != nil {
		return nil, false, fmt.Errorf("source topic %q: %w", source, err)
	}
	return details, created, nil
}

// SourceGrace bounds how long Ensure looks again for a source topic that a
// broker reported missing before it returns ErrNoSource. Each Kafka broker
// applies topic creations from the KRaft metadata log on its own schedule,
// so one broker can answer Metadata without a topic that another already
// serves: CI saw a topic created, its partitions served, and a start 0.6 s
// later refused because the broker it asked did not know the topic yet.
const SourceGrace = 3 * time.Second

// lookAgain lists all past kgo's metadata cache every 250 ms until the
// source appears or SourceGrace has passed, and returns the last listing
// (ErrNoSource, naming the source and what to change, when it never
// appears).
func lookAgain(ctx context.Context, adm *kadm.Client, source string, all []string) (kadm.TopicDetails, error) {
	deadline := time.Now().Add(SourceGrace)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("looking for source topic %q: %w", source, context.Cause(ctx))
		case <-time.After(250 * time.Millisecond):
		}
		details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), all...)
		if err != nil {
			return nil, fmt.Errorf("listing topics %v: %w", all, err)
		}
		if details.Has(source) {
			return details, nil
		}
	}
	return nil, fmt.Errorf("%w: %q, looked for %v (create it, or check the topics[].name spelling)", ErrNoSource, source, SourceGrace)
}

// sourceLimits is the source's max.message.bytes and retention (Kafka's
// defaults when not described).
func sourceLimits(ctx context.Context, adm *kadm.Client, source string) (maxBytes int, retention time.Duration, err error) {
	cfgs, err := adm.DescribeTopicConfigs(ctx, source)
	if err != nil {
		return 0, 0, fmt.Errorf("describing source topic %q: %w", source, err)
	}
	maxBytes, retention = defaultMaxMessageBytes, kafkaDefaultRetention
	if rc, err := cfgs.On(source, nil); err == nil {
		retention = retentionOf(rc)
		maxBytes = maxMessageBytes(rc, maxBytes)
	}
	return maxBytes, retention, nil
}

// maxMessageBytes is rc's max.message.bytes, def when unset or unreadable.
func maxMessageBytes(rc kadm.ResourceConfig, def int) int {
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			if n, err := strconv.Atoi(*c.Value); err == nil && n > 0 {
				return n
			}
		}
	}
	return def
}

// createStages creates the missing stages with the source's partition
// count, srcMax plus StageHeadroom as max.message.bytes (so a record that
// fit the source still fits with the kretry header run) and the retention
// stageRetention gives each, and checks the partition count of those that
// exist. It returns the topics it created.
func createStages(ctx context.Context, adm *kadm.Client, p *Plan, details kadm.TopicDetails, stages []string, parts int32, srcMax int, srcRetention time.Duration) ([]string, error) {
	stageMax := strconv.Itoa(srcMax + StageHeadroom)
	var errs []error
	var created []string
	for _, t := range stages {
		d, ok := details[t]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			cc := map[string]*string{"max.message.bytes": &stageMax, "retention.ms": new(stageRetention(p, t, srcRetention))}
			if _, err := adm.CreateTopic(ctx, parts, -1, cc, t); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				errs = append(errs, fmt.Errorf("creating topic %q with %d partitions: %w", t, parts, err))
			}
			created = append(created, t)
		case d.Err != nil:
			errs = append(errs, fmt.Errorf("topic %q: %w", t, d.Err))
		case int32(len(d.Partitions)) != parts:
			errs = append(errs, fmt.Errorf("topic %q has %d partitions, source %q has %d: %w (delete it, or name another topic in the config)",
				t, len(d.Partitions), p.Source, parts, ErrPartitionMismatch))
		}
	}
	return created, errors.Join(errs...)
}

// describeStages is the Topics of all: each one's max.message.bytes, and a
// warning for each stage that existed before and keeps records for too
// short a time (stageRetentionWarning).
func describeStages(ctx context.Context, adm *kadm.Client, p *Plan, details kadm.TopicDetails, all []string, parts int32, srcRetention time.Duration) (*Topics, error) {
	out := &Topics{Partitions: parts, MaxBytes: make(map[string]int, len(all))}
	rcs, err := adm.DescribeTopicConfigs(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("describing topics %v: %w", all, err)
	}
	for _, rc := range rcs {
		if rc.Name != p.Source && details.Has(rc.Name) {
			if w := stageRetentionWarning(p, rc.Name, srcRetention, retentionOf(rc)); w != "" {
				out.Warnings = append(out.Warnings, w)
			}
		}
		out.MaxBytes[rc.Name] = maxMessageBytes(rc, defaultMaxMessageBytes)
	}
	return out, nil
}

// StageHeadroom is added to the source's max.message.bytes for the tier,
// parking and DLQ topics kretry creates (bytes): room for the kretry header
// run (about 600 bytes plus the error message, itself truncated to fit).
const StageHeadroom = 64 << 10

// defaultMaxMessageBytes is Kafka's default max.message.bytes (bytes).
const defaultMaxMessageBytes = 1048588

// waitServed waits until every partition of the topics just created has a
// leader that answers ListOffsets. Kafka answers CreateTopics before the
// partitions' leaders serve them: a group client started at once got
// UNKNOWN_TOPIC_OR_PARTITION for new stage topics (seen with 100
// partitions) and its group rebalanced once more when they appeared.
func waitServed(ctx context.Context, adm *kadm.Client, parts int32, topics []string) error {
	if len(topics) == 0 {
		return nil
	}
	for {
		// Past kgo's metadata cache (see above), which would list new
		// topics as unknown for MetadataMinAge.
		offs, err := adm.ListEndOffsets(kadm.WithAuthorizedOps(ctx), topics...)
		if err == nil {
			err = offs.Error()
		}
		if err == nil {
			served := true
			for _, t := range topics {
				served = served && int32(len(offs[t])) == parts
			}
			if served {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v created but not served by their leaders: %w (last error: %v)", topics, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
