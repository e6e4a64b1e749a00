package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFile is the file inside the data dir that a running broker holds
// locked, with its PID in it.
const LockFile = "kretry.lock"

// ErrLocked is matched (errors.Is) by the *LockedError Start returns when
// another process holds the data dir.
var ErrLocked = errors.New("data dir in use")

// LockedError says that another process holds the data dir: two brokers
// writing one log would corrupt it.
type LockedError struct {
	// Dir is the data dir.
	Dir string
	// PID is the holder's process ID as written in the lock file, 0 when
	// it could not be read.
	PID int
}

func (e *LockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("embedded broker: data dir %s is in use by %s (a kretry run or kretry broker; lock %s): stop it, or give this one another data dir (embedded.data_dir, --data-dir)",
		e.Dir, holder, filepath.Join(e.Dir, LockFile))
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// dirLock is a held data dir lock; release ends it.
type dirLock struct{ f *os.File }

// lockDir takes an exclusive lock on dir's lock file, without waiting, and
// writes our PID into it. The lock (flock(2), where the system has it)
// belongs to the open file and ends with the process, however the process
// ends, so a stale file left by a killed process locks nothing.
func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: data dir lock: %w", err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded broker: data dir lock %s: %w", path, err)
	}
	if !held {
		b, _ := os.ReadFile(path)
		f.Close()
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return nil, &LockedError{Dir: dir, PID: pid}
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded broker: writing the PID to %s: %w", path, err)
	}
	return &dirLock{f: f}, nil
}

// release clears the PID and drops the lock. The file stays: removing it
// would let a process that opened it just before lock a file no one else
// sees.
func (l *dirLock) release() {
	if l == nil {
		return
	}
	_ = l.f.Truncate(0)
	l.f.Close()
}
