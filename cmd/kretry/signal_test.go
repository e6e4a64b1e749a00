package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalForcesExit: the first signal cancels the context, the
// second exits at once with status 1 and a line saying so.
func TestSecondSignalForcesExit(t *testing.T) {
	sigs := make(chan os.Signal, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	exited := make(chan int, 1)
	go watchSignals(sigs, cancel, func() *slog.Logger { return log }, func(code int) { exited <- code }, secondSignalMessage([]string{"run"}))

	sigs <- syscall.SIGTERM
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not cancel the context")
	}
	select {
	case code := <-exited:
		t.Fatalf("the first signal exited (%d)", code)
	case <-time.After(50 * time.Millisecond):
	}

	sigs <- os.Interrupt
	select {
	case code := <-exited:
		if code != exitFail {
			t.Errorf("exit status %d, want %d", code, exitFail)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second signal did not exit")
	}
	if !strings.Contains(logs.String(), "second signal while shutting down: exiting now") || !strings.Contains(logs.String(), "signal=interrupt") {
		t.Errorf("log %q does not say why it exits", logs.String())
	}
}

// TestSecondSignalMessage: only run's line speaks of deliveries in flight
// and their redelivery; lag --watch's does not.
func TestSecondSignalMessage(t *testing.T) {
	if m := secondSignalMessage([]string{"run", "-c", "x.yaml"}); !strings.Contains(m, "deliveries in flight") || !strings.Contains(m, "delivered again") {
		t.Errorf("run: %q", m)
	}
	for _, args := range [][]string{{"lag", "--watch"}, {"broker"}, {"parking", "release"}, nil} {
		if m := secondSignalMessage(args); m != "second signal while shutting down: exiting now" {
			t.Errorf("%q: %q, want the neutral line", args, m)
		}
	}
}
