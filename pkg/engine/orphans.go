package engine

import (
	"context"

	"github.com/kretry/kretry/retrytopics"
)

// warnOrphans logs, once at start, every tier topic of the source that the
// tier list no longer names but that still holds records of this group:
// after a change of retry.tiers nothing consumes it, its records wait for
// ever and, with ordering key, their keys stay blocked (found by a newcomer
// who shortened the tiers while a record waited in the old 30s tier).
func (e *Engine) warnOrphans(ctx context.Context) {
	orphans, err := retrytopics.Orphans(ctx, e.adm, &e.plan, e.opts.Group)
	if err != nil {
		e.log.Debug("could not look for tier topics left by an earlier tier list", "err", err)
		return
	}
	for _, o := range orphans {
		e.log.Warn("a tier topic no longer in retry.tiers still holds records of this group: nothing consumes them, and with ordering key their keys stay blocked; put the tier back in retry.tiers until it drains (kretry lag shows it at 0), then remove it",
			"tier_topic", o.Topic, "records", o.Records)
	}
}
