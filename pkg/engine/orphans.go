package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/retrytopics"
)

// warnOrphans logs, once at start, every tier topic of the source that the
// tier list no longer names but that still holds records of this group:
// after a change of retry.tiers nothing consumes it, its records wait for
// ever and, with ordering key, their keys stay blocked (found by a newcomer
// who shortened the tiers while a record waited in the old 30s tier).
func (e *Engine) warnOrphans(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second) // advisory: never hold the start up long
	defer cancel()
	orphans, err := retrytopics.Orphans(ctx, e.adm, append(slices.Clone(e.opts.ClientOpts), kgo.SeedBrokers(e.opts.Brokers...)), &e.plan, e.opts.Group)
	if err != nil {
		e.log.Debug("could not look for tier topics left by an earlier tier list", "err", err)
		return
	}
	for _, o := range orphans {
		e.log.Warn("a tier topic no longer in retry.tiers still holds records of this group: nothing consumes them, and with ordering key their keys stay blocked; put the tier back in retry.tiers until it drains (kretry lag shows it at 0), then remove it",
			"tier_topic", o.Topic, "records", o.Records)
	}
}

// ensureTopics runs retrytopics.Ensure until it succeeds, fails for good
// (a partition count that differs, a missing source) or ctx ends. A broker
// that is down when kretry starts — seen in the fault suite: an instance
// restarted while the broker it asked for the topic configs was killed —
// is a reason to wait, not to exit.
func (e *Engine) ensureTopics(ctx context.Context, extra []string) (*retrytopics.Topics, error) {
	for attempt := 0; ; attempt++ {
		topics, err := retrytopics.Ensure(ctx, e.adm, &e.opts.Plan, e.opts.CreateSource, extra...)
		if err == nil || errors.Is(err, retrytopics.ErrPartitionMismatch) || errors.Is(err, retrytopics.ErrNoSource) {
			return topics, err
		}
		if attempt == 0 {
			e.log.Warn("checking the stage topics failed; retrying until the brokers answer", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("engine: the brokers %v did not answer (New waits 30s at most, or until its context ends): check Brokers (host:port of Kafka listeners this program can reach) and ClientOpts (TLS, SASL); the last error: %w", e.opts.Brokers, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
