package dlq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/retrytopics"
)

// staleAfter is the lease TTL of the newer operation in the tests below:
// it watches the older one (TTL 40s, renewed every 10s) for 2s, sees no
// renewal and takes over.
const staleAfter = 2 * time.Second

// TestTakeoverFencesTheOlderOperation: an operation that judges the lease
// stale (here: it watches for a TTL of 2s an older one that renews every
// 10s, as if that one were paused longer than the TTL) takes over; its
// InitProducerID fences the older one, whose next commit fails with
// ErrFenced, and between them every record is moved exactly once.
func TestTakeoverFencesTheOlderOperation(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	// A long TTL: the older one renews its lease every 10s, so not during
	// the test, as if it were paused (a renewal would show it alive and
	// the newer one would be refused).
	const ttl = 40 * time.Second
	c := e.client(dlq.WithLeaseTTL(ttl))
	const n = 10
	snap := deadLetter(t, e, c, n)
	progressed := make(chan struct{}, 1)
	older := make(chan error, 1)
	var olderMoved int
	go func() {
		res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: 1, Progress: func(dlq.Progress) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		}})
		if res != nil {
			olderMoved = res.Moved
		}
		older <- err
	}()
	<-progressed
	res, err := e.client(dlq.WithLeaseTTL(staleAfter)).Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
	if err != nil {
		t.Fatalf("the newer operation: %v", err)
	}
	if err := <-older; !errors.Is(err, dlq.ErrFenced) {
		t.Fatalf("the older operation ended with %v, want ErrFenced", err)
	}
	t.Logf("older moved %d, newer %d", olderMoved, res.Moved)
	if olderMoved < 1 || olderMoved+res.Moved != n {
		t.Fatalf("older moved %d, newer %d: want at least 1 and %d in all", olderMoved, res.Moved, n)
	}
	seen := map[string]int{}
	for _, r := range readAll(t, e, e.plan.Tiers[0].Topic) {
		if o, err := retrytopics.ReadOrigin(r, false, 0); err == nil && o.Redrives == 1 {
			seen[o.ID()]++
		}
	}
	for _, en := range snap.Entries {
		if seen[en.ID] != 1 {
			t.Errorf("%s on the tier %d times, want once", en.ID, seen[en.ID])
		}
	}
}

// TestFencedOlderReleaseLeavesTheNewerHolding: an older operation taken
// over (paused past the TTL, then resumed) is fenced at its next commit
// and then releases its lease record. That release must not free the DLQ
// while the newer operation still holds it: a third operation is refused,
// naming the newer one, instead of taking over and fencing it.
func TestFencedOlderReleaseLeavesTheNewerHolding(t *testing.T) {
	e := newEnv(t, 2, time.Hour)
	const ttl = 40 * time.Second // renewals every 10s: none from the older during its run
	c := e.client(dlq.WithLeaseTTL(ttl))
	deadLetter(t, e, c, 10)
	progressed := make(chan struct{}, 1)
	older := make(chan error, 1)
	go func() {
		_, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: 1, Progress: func(dlq.Progress) {
			select {
			case progressed <- struct{}{}:
			default:
			}
		}})
		older <- err
	}()
	<-progressed
	holding, unblock := make(chan struct{}), make(chan struct{})
	newer := make(chan error, 1)
	var once sync.Once
	go func() {
		_, err := e.client(dlq.WithLeaseTTL(staleAfter)).Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1,
			Progress: func(dlq.Progress) { once.Do(func() { close(holding); <-unblock }) }})
		newer <- err
	}()
	if err := <-older; !errors.Is(err, dlq.ErrFenced) {
		t.Fatalf("the older operation ended with %v, want ErrFenced", err)
	}
	<-holding // the newer one holds the lease, its renewals running
	_, err := e.client(dlq.WithLeaseTTL(ttl)).Move(context.Background(), dlq.Request{Action: dlq.ActionDiscard, Reason: "third", Rate: -1})
	close(unblock)
	var busy *dlq.BusyError
	if !errors.As(err, &busy) || busy.Lease.Action != "redrive" {
		t.Errorf("third operation: %v, want a BusyError naming the newer redrive", err)
	}
	if err := <-newer; err != nil {
		t.Errorf("the newer operation: %v, want it to end cleanly", err)
	}
}
