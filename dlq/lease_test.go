package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
)

// TestSkewedClockDoesNotTakeOverALiveHolder: a newcomer whose clock runs
// more than two TTLs ahead of a running operation's host saw that
// operation's last renewal as older than two TTLs and took over without
// watching it, fencing a live redrive (found by a breaker helper). It is
// refused now, as any newcomer is while the holder renews.
func TestSkewedClockDoesNotTakeOverALiveHolder(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	c := e.client()
	deadLetter(t, e, c, 10)
	progressed, older := make(chan struct{}, 1), make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, err := c.Move(ctx, dlq.Request{Action: dlq.ActionRedrive, Rate: 1, Progress: func(dlq.Progress) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		}})
		older <- err
	}()
	<-progressed
	ahead := dlq.NewFakeClock()
	_ = ahead.Sleep(context.Background(), 25*time.Second) // more than two TTLs of 2s
	_, err := e.client(dlq.WithClock(ahead)).Move(context.Background(), dlq.Request{Action: dlq.ActionDiscard, Reason: "skewed", Rate: -1})
	var busy *dlq.BusyError
	if !errors.As(err, &busy) || busy.Lease.Action != "redrive" {
		t.Errorf("a newcomer 25s ahead while a redrive runs: %v, want a BusyError naming the redrive", err)
	}
	cancel()
	if err := <-older; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("the running redrive ended with %v, want it cancelled, not fenced", err)
	}
}

// TestDeadHolderIsReleasedByItsTaker: the lease record of an operation
// killed with kill -9 stays "held"; the operation that takes over after
// watching it for one TTL releases it, so the ones after do not watch it
// again (found by a breaker helper: every run within two TTLs of a kill
// waited one TTL, and later ones logged a takeover for every kill ever).
func TestDeadHolderIsReleasedByItsTaker(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	c := e.client()
	deadLetter(t, e, c, 4)
	topic := createMarks(t, e)
	dead := dlq.Lease{Holder: "rd-killed", Action: "redrive", By: "alice", Host: "h", PID: 1, State: "held", At: time.Now()}
	v, _ := json.Marshal(dead)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte("lease"), Value: v}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	c = e.client() // one that knows the marks topic
	held, err := c.HeldLeases(context.Background())
	if err != nil || len(held) != 1 || held[0].Holder != "rd-killed" {
		t.Fatalf("before: held %+v, err %v; want the killed holder", held, err)
	}
	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if err != nil || res.Moved != 4 {
		t.Fatalf("the run after the kill: %+v, %v; want 4 moved", res, err)
	}
	held, err = c.HeldLeases(context.Background())
	if err != nil || len(held) != 0 {
		t.Errorf("after the takeover: held %+v, err %v; want none (the taker released the killed holder)", held, err)
	}
}

// TestMarksTopicNotCompactedIsRefused: a marks topic an operator created
// with cleanup.policy=delete loses marks to retention while their records
// stay in the DLQ, which are then listed as waiting and moved again (a
// breaker helper redrove every record twice that way). Move refuses it,
// names the policy and the command that fixes it, and moves nothing.
func TestMarksTopicNotCompactedIsRefused(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	c := e.client()
	deadLetter(t, e, c, 4)
	createMarksWith(t, e, "delete")
	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if !errors.Is(err, dlq.ErrMarksNotCompacted) {
		t.Fatalf("redrive with marks of cleanup.policy=delete: %+v, %v; want ErrMarksNotCompacted", res, err)
	}
	for _, want := range []string{"cleanup.policy=delete, want compact", "--add-config cleanup.policy=compact", "nothing moved"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	snap, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	waiting := 0
	for _, en := range snap.Entries {
		if en.State == dlq.Waiting {
			waiting++
		}
	}
	if waiting != 4 || len(snap.Entries) != 4 {
		t.Errorf("%d of %d records waiting after the refused redrive, want 4 of 4", waiting, len(snap.Entries))
	}
}
