package dlq_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/overload"
	"github.com/kretry/kretry/pkg/delivery"
)

// A redrive into an app that is still down is an outage to the engine's
// breaker (issue 12: the overload controls apply to redriven records):
// once the breaker opens, the redriven records are held, not walked back
// to the DLQ, and when the app returns every one is delivered, once, and
// none is in the DLQ again.
func TestRedriveIntoADownAppIsHeldByTheBreaker(t *testing.T) {
	e := newEnv(t, 1, 50*time.Millisecond, 10*time.Second)
	c := e.client()
	gate := overload.New(overload.Config{MaxInFlight: 8, Logger: testLogger(t),
		Breaker: overload.BreakerConfig{Enabled: true, Window: 6, FailureRatio: 0.5, Wait: time.Second, MaxWait: 5 * time.Second, Probes: 3}})
	e.app.set(rejectAll)
	e.runWith(gate)
	const n = 12
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "order-%d", i)})
	}
	e.produce(recs...)
	snap := e.waitDLQ(c, n)

	e.app.set(func(*delivery.Message) error { return &delivery.StatusError{Status: 503} })
	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1, By: "test"})
	if err != nil || res.Moved != n {
		t.Fatalf("redrive: %+v, %v; want %d moved", res, err, n)
	}
	eventually(t, "the breaker open on the redriven records' failures", func() bool {
		s := gate.Snapshot(time.Now())
		return s.Opened[overload.ReasonDependency] > 0 && s.Held > 0
	})
	e.app.set(nil)
	eventually(t, "every redriven record delivered", func() bool {
		for _, en := range snap.Entries {
			if e.app.ackedCount(en.ID) == 0 {
				return false
			}
		}
		return true
	})
	after, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Entries) != n {
		t.Errorf("%d records in the DLQ after the app returned, want the %d first ones only (none walked back)", len(after.Entries), n)
	}
	for _, en := range snap.Entries {
		if k := e.app.ackedCount(en.ID); k != 1 {
			t.Errorf("%s acknowledged %d times, want 1", en.ID, k)
		}
	}
	t.Logf("breaker: %+v", gate.Snapshot(time.Now()))
}

// A redrive of records the app still rejects (one permanent answer, many
// keys, on an otherwise quiet topic) sends them back to the DLQ, once
// each: their failure says nothing new of the app, so it does not trip
// the guard, which would stop the delivery of every record of the topic
// for the breaker's wait (the operator walk-through of 7 December: 15
// such records stopped a topic for ~70s).
func TestRedriveOfRejectedRecordsDoesNotTripTheGuard(t *testing.T) {
	e := newEnv(t, 1, 50*time.Millisecond, 10*time.Second)
	c := e.client()
	gate := overload.New(overload.Config{MaxInFlight: 8, Logger: testLogger(t),
		Breaker: overload.BreakerConfig{Enabled: true, Window: 20, FailureRatio: 0.5, Wait: 5 * time.Second, MaxWait: 10 * time.Second, Probes: 3},
		Guard:   overload.GuardConfig{Enabled: true, MaxDeadLetters: 5, Window: time.Minute, Share: 0.9}})
	e.app.set(func(m *delivery.Message) error {
		if bytes.HasPrefix(m.Value, []byte("bad")) {
			return &delivery.StatusError{Status: 422, Body: "cannot parse order"}
		}
		return nil
	})
	e.runWith(gate)
	// Each bad record among ten good ones: far below the guard's share.
	const n = 12
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "bad-%d", i), Value: fmt.Appendf(nil, "bad-%d", i)})
		for j := range 10 {
			recs = append(recs, &kgo.Record{Key: fmt.Appendf(nil, "good-%d-%d", i, j), Value: []byte("good")})
		}
	}
	e.produce(recs...)
	e.waitDLQ(c, n)
	if s := gate.Snapshot(time.Now()); s.Opened[overload.ReasonSystemic] > 0 {
		t.Fatalf("the guard tripped on the first dead-lettering (%+v): the test's traffic is wrong", s)
	}

	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1, By: "test"})
	if err != nil || res.Moved != n {
		t.Fatalf("redrive: %+v, %v; want %d moved", res, err, n)
	}
	eventually(t, "every redriven record back in the DLQ", func() bool {
		s, err := c.Read(context.Background())
		return err == nil && len(s.Entries) >= 2*n
	})
	if s := gate.Snapshot(time.Now()); s.Opened[overload.ReasonSystemic] > 0 || s.State != overload.Closed {
		t.Errorf("gate after the redrive: %+v; want closed, the guard never tripped", s)
	}
	if got := len(e.app.redriven()); got != n {
		t.Errorf("the app saw %d redriven deliveries, want %d (each once, none held)", got, n)
	}
	s, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Entries) != 2*n {
		t.Errorf("%d DLQ records, want %d: the first %d and each once again", len(s.Entries), 2*n, n)
	}
}
