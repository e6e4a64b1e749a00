package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncWriter is a bytes.Buffer safe for a command running in a goroutine.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestDataDirInUse: while `kretry broker` holds a data dir, a second
// `kretry broker` and a `kretry run` with the embedded broker on that dir
// exit 1 naming the dir and the PID holding it.
func TestDataDirInUse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncWriter{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"broker", "--listen", deadAddr(t), "--data-dir", dir}, out, out) }()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("first broker: exit %d:\n%s", code, out.String())
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "listening") {
		if time.Now().After(deadline) {
			t.Fatalf("first broker did not start:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, cfg, fmt.Sprintf("embedded: {listen: %q, data_dir: %q}\napp: {url: http://127.0.0.1:8080/kafka}\nmetrics: {listen: \"\"}\ntopics: [{name: orders}]\n", deadAddr(t), dir))
	for _, args := range [][]string{
		{"broker", "--listen", deadAddr(t), "--data-dir", dir},
		{"run", "-c", cfg},
	} {
		var o, e bytes.Buffer
		code := run(context.Background(), args, &o, &e)
		if code != exitFail {
			t.Errorf("kretry %s: exit %d, want %d", args[0], code, exitFail)
		}
		for _, w := range []string{"data dir " + dir + " is in use", "process " + strconv.Itoa(os.Getpid())} {
			if !strings.Contains(e.String(), w) {
				t.Errorf("kretry %s: stderr lacks %q:\n%s", args[0], w, e.String())
			}
		}
	}
}
