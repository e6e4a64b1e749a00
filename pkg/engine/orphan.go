package engine

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file tells our own orphaned group member from a twin.
//
// In a broker outage Kafka can register our instance id under a member id
// our client never learns: a JoinGroup the coordinator processed whose
// answer was lost, retried by franz-go; a coordinator that moved while it
// persisted a static member's new id. The member our client did learn then
// meets FENCED_INSTANCE_ID, and the group lists another member under our
// instance id, exactly as when a twin (another process with the same
// kafka.instance_id) took over. Seen in the fault suite on Kafka: an
// instance restarted during a broker kill exited 1 blaming a twin that did
// not exist.
//
// The tell is the outage: while our client had broker trouble in the last
// troubleWindow, the first takeover signal in a minute rebuilds the session
// (rejoining under our instance id replaces the orphan, as a restart would)
// instead of ending Run. A twin survives that: it is fenced in turn, and
// whichever of the two meets a second takeover signal within the minute
// stops with the FencedError. Without broker trouble a takeover signal
// stops Run at once, as before.

// troubleWindow is how long after broker trouble a takeover signal may be
// our own orphan's.
const troubleWindow = time.Minute

// errPardoned marks an errSessionReset whose takeover signal pardonTakeover
// took for our own orphan: resetSession then does not ask the group again.
var errPardoned = errors.New("the member holding our instance id is taken for our own orphan")

// brokerTrouble is a kgo hook recording when the client last failed to
// reach a broker, or lost the answer to a group request it had sent.
type brokerTrouble struct{ last atomic.Int64 }

var (
	_ kgo.HookBrokerConnect = (*brokerTrouble)(nil)
	_ kgo.HookBrokerE2E     = (*brokerTrouble)(nil)
)

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (b *brokerTrouble) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		b.last.Store(time.Now().UnixNano())
	}
}

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (b *brokerTrouble) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	switch kmsg.Key(key) {
	case kmsg.FindCoordinator, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat:
	default:
		return
	}
	if err := e2e.Err(); err != nil && !errors.Is(err, context.Canceled) {
		b.last.Store(time.Now().UnixNano())
	}
}

// since reports how long ago the last trouble was, and false when there
// was none.
func (b *brokerTrouble) since(now time.Time) (time.Duration, bool) {
	n := b.last.Load()
	if n == 0 {
		return 0, false
	}
	return now.Sub(time.Unix(0, n)), true
}

// pardonTakeover reports whether the takeover signal err may be our own
// orphaned member's (see the top of this file), and logs why it goes on.
// Only Run's goroutine calls it.
func (e *Engine) pardonTakeover(err error, now time.Time) bool {
	if e.opts.InstanceID == "" {
		return false
	}
	ago, ok := e.trouble.since(now)
	if !ok || ago > troubleWindow || (!e.lastPardon.IsZero() && now.Sub(e.lastPardon) < time.Minute) {
		return false
	}
	e.lastPardon = now
	e.log.Warn("another member holds our instance id after broker trouble: most likely our own join whose answer was lost, not another instance; rejoining under the id. If another live instance uses it, one of the two stops at the next takeover within a minute",
		"instance_id", e.opts.InstanceID, "trouble_ago", ago.Round(time.Millisecond), "err", err)
	return true
}
