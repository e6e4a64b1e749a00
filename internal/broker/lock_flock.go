//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package broker

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an exclusive flock(2) on f without waiting; held is false
// when another open file description holds it.
//
// It uses the standard library's syscall.Flock rather than
// golang.org/x/sys/unix: the same call, and no direct dependency for the
// modules that import this package (x/sys is only indirect in go.mod, and
// absent from e2e/bench's go.sum).
func tryLock(f *os.File) (held bool, err error) {
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
