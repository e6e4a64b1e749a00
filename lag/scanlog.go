package lag

import (
	"errors"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// coordinatorGrace is how long after Run starts a scan that failed only
// because a group coordinator is not ready yet is logged at info level: a
// new cluster loads its __consumer_offsets partitions in its first seconds.
const coordinatorGrace = 30 * time.Second

// logScan logs a scan's error when it differs from the previous scan's, at
// warn level; at info level when it is only a coordinator still loading,
// since (since Run started) < coordinatorGrace; at warn level once such an
// error persists past that.
func (m *Monitor) logScan(err error, since time.Duration) {
	msg := errString(err)
	switch {
	case msg != "" && since < coordinatorGrace && coordinatorLoading(err):
		if msg != m.lastErr {
			m.log.Info("lag scan incomplete: a group coordinator is not ready yet (normal in a new cluster's first seconds)", "err", oneLine(msg))
		}
		m.lastErr, m.loading = msg, true
		return
	case msg != "" && (msg != m.lastErr || m.loading):
		m.log.Warn("lag scan incomplete", "err", oneLine(msg))
	case msg == "" && m.lastErr != "":
		m.log.Info("lag scan complete again")
	}
	m.lastErr, m.loading = msg, false
}

// oneLine joins the lines of a joined error (one per group or topic) with
// "; ", so that a log line stays one line.
func oneLine(msg string) string { return strings.ReplaceAll(msg, "\n", "; ") }

// coordinatorLoading reports whether every error joined in err is a group
// coordinator not ready: COORDINATOR_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR, all retriable.
func coordinatorLoading(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !coordinatorLoading(e) {
				return false
			}
		}
		return len(j.Unwrap()) > 0
	}
	return errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) || errors.Is(err, kerr.NotCoordinator)
}
