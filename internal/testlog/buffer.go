// Package testlog is what the tests of several packages share to read the
// logs of the code they run.
package testlog

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a log destination safe for the goroutines that write to it (a
// logger's, a subprocess's output copier) and the test that reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Lines returns the lines written so far that hold s, with their newlines.
func (b *Buffer) Lines(s string) []string {
	var out []string
	for l := range strings.Lines(b.String()) {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
