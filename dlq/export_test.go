package dlq

import (
	"context"
	"sync"
	"time"
)

// FakeClock is a clock whose Sleep advances it at once.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func NewFakeClock() *FakeClock { return &FakeClock{now: time.Now()} }

func (f *FakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *FakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.now = f.now.Add(max(d, 0))
	f.mu.Unlock()
	return nil
}

// WithClock replaces the clock of the rate limit.
func WithClock(c clock) Option { return func(cl *Client) { cl.clk = c } }
