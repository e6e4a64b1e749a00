package engine

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/internal/testlog"
)

// TestRebalanceLogsReadablePartitions: the assigned and revoked lines list
// the partitions as "orders[0 1] orders.retry.50ms[0 1]", not as a Go map.
func TestRebalanceLogsReadablePartitions(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	o := e.options(e.app)
	var logs testlog.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	_, stop := e.start(o)
	want := `partitions="` + e.plan.Source + `[0 1] ` + e.plan.Tiers[0].Topic + `[0 1]"`
	eventually(t, "partitions assigned", func() bool { return len(logs.Lines(`msg="partitions assigned"`)) > 0 })
	stop()
	for _, msg := range []string{`msg="partitions assigned"`, `msg="partitions revoked"`} {
		l := logs.Lines(msg)
		if len(l) != 1 || !strings.Contains(l[0], want) || strings.Contains(l[0], "map[") {
			t.Errorf("%s lines %q, want one with %s", msg, l, want)
		}
	}
}
