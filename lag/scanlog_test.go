package lag

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// A coordinator still loading in the first scans is info, not warn; the
// same error persisting past coordinatorGrace is warned once; any other
// error is warned at once.
func TestScanLogCoordinatorLoading(t *testing.T) {
	loading := errors.Join(
		fmt.Errorf("group %q: fetch offsets: %w", "orders-kretry", kerr.CoordinatorNotAvailable),
		fmt.Errorf("group %q: topic %q: %w", "orders-kretry", "orders", kerr.CoordinatorNotAvailable))
	other := errors.Join(loading, fmt.Errorf("metadata: %w", kerr.UnknownTopicOrPartition))
	steps := []struct {
		err   error
		since time.Duration
		want  string // the level of the line logged, "" for none
	}{
		{loading, 0, "INFO"},
		{loading, 5 * time.Second, ""}, // the same error: no second line
		{kerr.CoordinatorLoadInProgress, 10 * time.Second, "INFO"},
		{kerr.CoordinatorLoadInProgress, coordinatorGrace, "WARN"}, // persists
		{kerr.CoordinatorLoadInProgress, coordinatorGrace + 5*time.Second, ""},
		{nil, time.Minute, "INFO"}, // complete again
		{other, time.Minute, "WARN"},
		{nil, time.Minute, "INFO"},
		{other, 0, "WARN"}, // not only the coordinator: warn even at the start
		{kerr.NotCoordinator, time.Minute, "WARN"},
	}
	var buf bytes.Buffer
	m := &Monitor{log: slog.New(slog.NewTextHandler(&buf, nil))}
	for i, st := range steps {
		buf.Reset()
		m.logScan(st.err, st.since)
		got := buf.String()
		switch {
		case st.want == "" && got != "":
			t.Errorf("step %d (%v after %v): logged %q, want nothing", i, st.err, st.since, got)
		case st.want != "" && !strings.Contains(got, "level="+st.want):
			t.Errorf("step %d (%v after %v): logged %q, want a line at %s", i, st.err, st.since, got, st.want)
		}
		if strings.Count(got, "\n") > 1 || strings.Contains(got, `\n`) {
			t.Errorf("step %d: logged %q, want one line, the joined errors separated by \"; \"", i, got)
		}
	}
}
