package dlq

import (
	"context"
	"time"
)

// clock is the time source of the rate limit and the lease, replaceable in
// tests so that pacing is checked without sleeping.
type clock interface {
	Now() time.Time
	// Sleep waits d or until ctx ends, whichever is first.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
