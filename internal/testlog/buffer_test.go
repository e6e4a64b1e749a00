package testlog

import (
	"fmt"
	"sync"
	"testing"
)

// TestBufferConcurrentWriters: lines written by many goroutines at once
// all arrive whole, and Lines finds those holding a string.
func TestBufferConcurrentWriters(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d msg=%s\n", i, map[bool]string{true: "even", false: "odd"}[i%2 == 0]) })
	}
	wg.Wait()
	if n := len(b.Lines("msg=even")); n != 25 {
		t.Errorf("%d lines hold msg=even, want 25:\n%s", n, b.String())
	}
	if n := len(b.Lines("line ")); n != 50 {
		t.Errorf("%d lines, want 50", n)
	}
}
