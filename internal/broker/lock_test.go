package broker_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kretry/kretry/internal/broker"
)

func start(t *testing.T, dir string) (*broker.Broker, error) {
	t.Helper()
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", DataDir: dir, Partitions: 1})
	if err == nil {
		t.Cleanup(b.Close)
	}
	return b, err
}

// TestDataDirLock: a second broker on a data dir in use is refused with
// the dir and the holder's PID; once the first closes, the dir is free.
func TestDataDirLock(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, err := start(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	if b, err := os.ReadFile(filepath.Join(dir, broker.LockFile)); err != nil || strings.TrimSpace(string(b)) != pid {
		t.Errorf("lock file holds %q (%v), want our PID %s", b, err, pid)
	}

	_, err = start(t, dir)
	var le *broker.LockedError
	if !errors.As(err, &le) || !errors.Is(err, broker.ErrLocked) {
		t.Fatalf("second Start on %s: %v, want a *LockedError", dir, err)
	}
	if le.Dir != dir || le.PID != os.Getpid() {
		t.Errorf("LockedError = %+v, want dir %s, PID %d", le, dir, os.Getpid())
	}
	for _, w := range []string{dir, "process " + pid, "embedded.data_dir", "--data-dir"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}

	first.Close()
	if _, err := start(t, dir); err != nil {
		t.Fatalf("Start after the first broker closed: %v", err)
	}
}

// TestStaleLockFile: a lock file left by a process that died locks
// nothing (the lock is the process's, not the file's).
func TestStaleLockFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, broker.LockFile), []byte("999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := start(t, dir); err != nil {
		t.Fatalf("Start with a stale lock file: %v", err)
	}
}

// TestMemoryOnlyNotLocked: without a data dir there is nothing to lock.
func TestMemoryOnlyNotLocked(t *testing.T) {
	for range 2 {
		if _, err := start(t, ""); err != nil {
			t.Fatal(err)
		}
	}
}

// TestListenInUse: a port another process holds is refused naming the key
// it came from and what to do, with the data dir left unlocked.
func TestListenInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	_, err = broker.Start(broker.Config{Listen: ln.Addr().String(), ListenFrom: "embedded.listen", DataDir: dir, Partitions: 1})
	want := "embedded broker: embedded.listen " + ln.Addr().String() + ": listen tcp " + ln.Addr().String() + ": bind: address already in use (another process listens there"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "set embedded.listen to a free host:port") {
		t.Fatalf("Start on a port in use: %v, want %q and what to set", err, want)
	}
	if _, err := start(t, dir); err != nil {
		t.Errorf("the data dir stayed locked after the failed start: %v", err)
	}
}
