package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/flow"
)

// waitLogger counts franz-go's line for the 500ms it holds a transact
// session after a transaction that committed no offset (see fetched.go).
type waitLogger struct{ waits atomic.Int64 }

func (l *waitLogger) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (l *waitLogger) Log(_ kgo.LogLevel, msg string, _ ...any) {
	if strings.Contains(msg, "sleeping 500ms") {
		l.waits.Add(1)
	}
}

// TestBarrierCommitsWhatTheGroupHas: the barrier written when a parking
// engine's partitions are assigned commits an offset the group already has
// (-1 in a new group), so franz-go never holds the session for its 500ms
// (issue 10: the first delivery after a join); and a successor of a
// stopped engine (a restarted process, which has committed nothing itself)
// moves no committed offset backwards (the fault suite on Kafka once saw
// orders.parking/4 go from 5 to -1).
func TestBarrierCommitsWhatTheGroupHas(t *testing.T) {
	e := newEnv(t, 2, time.Second)
	e.app.setAnswer(failing(map[string][]error{"v0": {e503}}))
	e.produce(rec("K", "v0"), rec("K", "v1"), rec("J", "w0"))

	var logA waitLogger
	oA := e.keyedOptions(e.app, flow.OnDeadLetterRelease)
	oA.ClientOpts = []kgo.Opt{kgo.WithLogger(&logA)}
	oA.GroupOpts = fastGroup
	engA, stopA := e.start(oA)
	eventually(t, "K's records and w0 acknowledged", func() bool { return e.app.numAcked() == 3 })
	eventually(t, "nothing blocked or parked", func() bool {
		return engA.Stats().BlockedKeys.Load() == 0 && engA.Stats().ParkedRecords.Load() == 0
	})
	stopA()
	if n := logA.waits.Load(); n != 0 {
		t.Errorf("a new group's engine: franz-go held the session for 500ms after %d transactions (a barrier committed no offset)", n)
	}
	before := e.committed()
	if len(before) == 0 {
		t.Fatal("the first engine committed no offset: the check below would prove nothing")
	}

	var logB waitLogger
	oB := e.keyedOptions(e.app, flow.OnDeadLetterRelease)
	oB.ClientOpts = []kgo.Opt{kgo.WithLogger(&logB)}
	oB.GroupOpts = fastGroup
	e.start(oB)
	e.produce(rec("K", "v2"))
	eventually(t, "the successor delivered v2", func() bool { return len(e.app.ackedValues("K")) == 3 })
	for tp, was := range before {
		eventually(t, tp+" committed where it was or later", func() bool {
			now, ok := e.committed()[tp]
			if ok && now < was {
				t.Fatalf("%s: committed offset moved backwards, %d → %d", tp, was, now)
			}
			return ok
		})
	}
	if n := logB.waits.Load(); n != 0 {
		t.Errorf("a restarted engine: franz-go held the session for 500ms after %d transactions", n)
	}
}

// committed returns the group's committed offsets, by "topic/partition".
func (e *env) committed() map[string]int64 {
	e.t.Helper()
	offs, err := e.adm.FetchOffsets(context.Background(), e.group())
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]int64{}
	offs.Each(func(o kadm.OffsetResponse) { out[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.At })
	return out
}
