package retrytopics_test

// Attacks on Ensure's look-again loop for a missing source (881b6e7).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kretry/kretry/retrytopics"
)

// TestEnsureBreakCancelDuringLookAgain: a context cancelled while Ensure
// looks again for the source must end it promptly with an error that says
// so (errors.Is context.Canceled), not after SourceGrace.
func TestEnsureBreakCancelDuringLookAgain(t *testing.T) {
	_, adm, _ := newAdmin(t)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(400*time.Millisecond, cancel)
	t0 := time.Now()
	got, err := retrytopics.Ensure(ctx, adm, ensurePlan(), 0)
	took := time.Since(t0)
	t.Logf("Ensure returned after %v: %v", took, err)
	if err == nil {
		t.Fatalf("Ensure = %+v, nil after a cancel; want an error", got)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %q is not context.Canceled", err)
	}
	if took > 400*time.Millisecond+300*time.Millisecond {
		t.Errorf("Ensure took %v after a cancel at 400ms", took)
	}
}

// TestEnsureBreakAlreadyCancelled: a context cancelled before the call.
func TestEnsureBreakAlreadyCancelled(t *testing.T) {
	_, adm, _ := newAdmin(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	t0 := time.Now()
	_, err := retrytopics.Ensure(ctx, adm, ensurePlan(), 0)
	t.Logf("Ensure returned after %v: %v", time.Since(t0), err)
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Ensure with a cancelled context: %v, want context.Canceled", err)
	}
	if time.Since(t0) > 300*time.Millisecond {
		t.Errorf("took %v", time.Since(t0))
	}
}
