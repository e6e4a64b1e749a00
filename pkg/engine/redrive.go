package engine

import (
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// A record redriven from the DLQ (package dlq) arrives on the first retry
// tier, due at once, with kretry-attempt 0 and the redrive headers
// (retrytopics.HeaderRedriveCount, HeaderRedriveID). The engine delivers it
// like any tier record, with two differences, applied at the call sites
// marked "// redrive" in shard.go:
//
//   - the delivery carries the redrive count and id (delivery.Message);
//   - its first delivery after the redrive is routed as a first attempt
//     (stage 0), so a transient failure goes to the first tier again and
//     the record gets every tier afresh, not only the tiers after the first.
//
// It never blocks its key and is never parked (it is not a head: no block
// op is written for it, see afterDelivery): its key has moved on since it
// was dead-lettered, and the app tells a stale redriven record by its
// kretry-redrive-count. A permanent failure sends it back to the DLQ, once,
// in the move's transaction, with its redrive count kept (retrytopics.Move
// writes the redrive headers on every hop).

// setRedrive copies o's redrive count and id to m.
func setRedrive(m *delivery.Message, o *retrytopics.Origin) {
	m.Redrives, m.RedriveID = int(min(o.Redrives, 1<<31-1)), o.RedriveID
}

// redriveRouteStage is the stage to route a delivery of en from: 0 for a
// redriven record's first delivery since its redrive, stage otherwise.
func redriveRouteStage(en *entry, stage int) int {
	if stage > 0 && en.origin.Redrives > 0 && en.origin.Attempts == 0 {
		return 0
	}
	return stage
}
