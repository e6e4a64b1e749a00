package engine

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
)

// TestDependencyDownAgainAfterACloseDeadLettersNothing (overload/again.go;
// the third breaker round of 7 December: 50 of 50 held records
// dead-lettered in its gate rig): the app answers 503, the breaker opens
// and holds the records on their last tier (one 300ms tier); the app
// answers exactly the two probes of one round, which close the breaker,
// and 503 again for 2s. The records delivered after the close fail on
// their last tier before any fresh record succeeded: none may be
// dead-lettered, and every record is delivered once the app is back.
func TestDependencyDownAgainAfterACloseDeadLettersNothing(t *testing.T) {
	e := newEnv(t, 3, 300*time.Millisecond)
	var allow atomic.Int64 // successes the app grants before it is up
	var up atomic.Bool
	e.app.setAnswer(func(*delivery.Message) error {
		if up.Load() || allow.Add(-1) >= 0 {
			return nil
		}
		return &delivery.StatusError{Status: 503, Body: "unavailable"}
	})
	const n = 30
	e.produce(keyed(n, 3)...)
	o, g, logs := e.gated(e.app, false)
	eng, _ := e.start(o)
	eventually(t, "records held on their last tier", func() bool {
		return g.Snapshot(time.Now()).Held >= 6 && strings.Count(logs.String(), "a probe failed") >= 2
	})
	allow.Store(2) // one probe round (gated: 2 probes)
	eventually(t, "the breaker closed on the probes", func() bool { return strings.Contains(logs.String(), "breaker closed: probes succeeded") })
	time.Sleep(2 * time.Second) // down again, with the breaker closed at first
	up.Store(true)
	deadLettered := func() int64 { return eng.Stats().Exhausted.Load() + eng.Stats().Permanent.Load() }
	eventually(t, "every record acknowledged or dead-lettered", func() bool { return e.app.numAcked()+int(deadLettered()) == n })
	if d := deadLettered(); d != 0 {
		t.Errorf("%d of %d records dead-lettered by a dependency down again after a close; want none", d, n)
	}
	if s := g.Snapshot(time.Now()); s.Opened[overload.ReasonDependency] < 2 {
		t.Errorf("opened %v for the dependency, want at least twice", s.Opened)
	}
}

// TestWrongPathAfterADependencyOutage (overload.Gate.guardsOutage; a
// breaker helper's rig of 7 December: 15 dead-lettered against 10): the
// app acknowledges 30 records, answers 503 until the breaker opens, and
// comes back on a wrong path: 404 to everything. The probes answered 404
// close the dependency outage (the app answers); at most max_dead_letters
// (10) records may be dead-lettered with the 404 before the guard stops
// delivery. Once the path is fixed every other record is acknowledged.
func TestWrongPathAfterADependencyOutage(t *testing.T) {
	e := newEnv(t, 3, 300*time.Millisecond)
	var answered atomic.Int64
	var wrongPath, fixed atomic.Bool
	e.app.setAnswer(func(*delivery.Message) error {
		switch {
		case answered.Add(1) <= 30 || fixed.Load():
			return nil
		case wrongPath.Load():
			return &delivery.StatusError{Status: 404, Body: "no route for /kafka"}
		}
		return &delivery.StatusError{Status: 503, Body: "unavailable"}
	})
	const n = 300
	e.produce(keyed(n, 3)...)
	o, g, _ := e.defaultGate(e.app)
	eng, _ := e.start(o)
	eventually(t, "the breaker open for the dependency", func() bool { return g.Snapshot(time.Now()).Opened[overload.ReasonDependency] > 0 })
	wrongPath.Store(true)
	eventually(t, "the guard tripped", func() bool { return g.Snapshot(time.Now()).Opened[overload.ReasonSystemic] > 0 })
	fixed.Store(true)
	// A dead-letter behind a held record of its partition is committed
	// with it: the counts are whole once every record settled.
	st := eng.Stats()
	eventually(t, "every record acknowledged or dead-lettered", func() bool {
		return e.app.numAcked()+int(st.Permanent.Load()+st.Exhausted.Load()) == n
	})
	if d := st.Permanent.Load(); d > 10 {
		t.Errorf("%d records dead-lettered with 404, want at most max_dead_letters 10", d)
	}
	if d := st.Exhausted.Load(); d != 0 {
		t.Errorf("%d records dead-lettered as exhausted by the outage, want none", d)
	}
}
