package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
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

// TestListenInUse: an embedded broker that cannot bind names where the
// address came from (--listen, embedded.listen); `kretry broker
// --data-dir ""` says it keeps the log in memory.
func TestListenInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, cfg, fmt.Sprintf("embedded: {listen: %q, data_dir: %q}\napp: {url: http://127.0.0.1:8080/kafka}\nmetrics: {listen: \"\"}\ntopics: [{name: orders}]\n", addr, t.TempDir()))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"broker", "--listen", addr, "--data-dir", ""}, "--listen " + addr + ": listen tcp"},
		{[]string{"run", "-c", cfg}, "embedded.listen " + addr + ": listen tcp"},
	} {
		var o, e bytes.Buffer
		if code := run(context.Background(), tc.args, &o, &e); code != exitFail {
			t.Errorf("kretry %s: exit %d, want %d", tc.args[0], code, exitFail)
		}
		if !strings.Contains(e.String(), tc.want) {
			t.Errorf("kretry %s: stderr lacks %q:\n%s", tc.args[0], tc.want, e.String())
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	out := &syncWriter{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"broker", "--listen", deadAddr(t), "--data-dir", ""}, out, out) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "listening") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if !strings.Contains(out.String(), "(in memory)") {
		t.Errorf("kretry broker --data-dir \"\" does not say (in memory):\n%s", out.String())
	}
}
