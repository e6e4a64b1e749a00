package engine

// A breaker pass on issue 11's overload controls (docs/OVERLOAD.md): the
// scenarios a hostile world tries that the author's tests did not. Each
// runs on both brokers (see main_test.go).

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
)

// TestBreakRestartsDuringAnOutageDeadLetterNothing: the app answers 503
// for longer than the whole tier chain (one 300ms tier), and the process
// is restarted three times while the breaker is open (a crash loop, or a
// deploy during the outage). Each new process starts with a closed
// breaker and no evidence; the records it fails before its breaker opens
// again must not walk the tiers into the DLQ: issue 11's "an outage of
// any length dead-letters nothing by itself". When the app returns every
// record is delivered and the DLQ is empty.
func TestBreakRestartsDuringAnOutageDeadLetterNothing(t *testing.T) {
	for _, restarts := range []int{0, 3} {
		t.Run(fmt.Sprintf("restarts=%d", restarts), func(t *testing.T) { testRestartsDuringAnOutage(t, restarts) })
	}
}

func testRestartsDuringAnOutage(t *testing.T, restarts int) {
	e := newEnv(t, 3, 300*time.Millisecond)
	var down atomic.Bool
	down.Store(true)
	e.app.setAnswer(func(*delivery.Message) error {
		if down.Load() {
			return &delivery.StatusError{Status: 503, Body: "unavailable"}
		}
		return nil
	})
	const n = 60
	e.produce(keyed(n, 3)...)
	var engs []*Engine
	deadLettered := func() (n int64) {
		for _, eng := range engs {
			n += eng.Stats().Exhausted.Load() + eng.Stats().Permanent.Load()
		}
		return n
	}
	for i := range restarts + 1 {
		o, g, logs := e.gated(e.app, true)
		o.GroupOpts = fastGroup
		eng, stop := e.start(o)
		engs = append(engs, eng)
		eventually(t, "the breaker open", func() bool { return g.Snapshot(time.Now()).Opened[overload.ReasonDependency] > 0 })
		// Two lost rounds (200ms + 400ms): the records moved to the tier
		// before the breaker opened are due, held by the open breaker.
		eventually(t, "two failed probe rounds", func() bool { return strings.Count(logs.String(), "a probe failed") >= 2 })
		if i < restarts {
			stop() // the next process knows nothing of this one's breaker
		}
	}
	down.Store(false)
	eventually(t, "every record acknowledged or dead-lettered", func() bool { return e.app.numAcked()+int(deadLettered()) == n })
	if d := deadLettered(); d != 0 {
		t.Errorf("%d of %d records dead-lettered by an outage with %d restarts; an outage must dead-letter nothing", d, n, restarts)
	}
}
