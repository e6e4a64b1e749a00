package dlq_test

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/retrytopics"
)

// Kill points of the helper redrive (helperRedrive): where it SIGKILLs
// itself, so the point is exact, not a race with the parent.
const (
	killLeaseBuffered = "lease-buffered"  // the lease record handed to the producer, not yet sent
	killLeaseWritten  = "lease-written"   // the lease's Produce request written to the broker, no answer read
	killBeforeFirstTx = "before-first-tx" // lease held, older producer fenced, marks read; no transaction begun
	killBeforeEnd     = "before-end"      // the first transaction's records acknowledged, EndTxn not sent
	killEndSent       = "end-sent"        // the first EndTxn (commit) written to the coordinator, no answer read
	killAfterEnd      = "after-end"       // the first transaction committed, the next not begun
)

// killAt returns the client options and sets the callbacks of req that
// kill this process at point.
func killAt(point string, req *dlq.Request) []kgo.Opt {
	die := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	switch point {
	case killBeforeFirstTx:
		req.Started = func(*dlq.Result) { die() }
	case killAfterEnd:
		req.Progress = func(dlq.Progress) { die() }
	}
	return []kgo.Opt{kgo.WithHooks(killHook{point: point, die: die})}
}

type killHook struct {
	point string
	die   func()
}

func (h killHook) OnProduceRecordBuffered(r *kgo.Record) {
	if h.point == killLeaseBuffered && string(r.Key) == "lease" {
		h.die()
	}
}

func (h killHook) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if h.point == killBeforeEnd && err == nil && !strings.HasSuffix(r.Topic, ".marks") {
		h.die()
	}
}

func (h killHook) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	switch {
	case err != nil:
	case h.point == killLeaseWritten && key == kmsg.Produce.Int16():
		h.die()
	case h.point == killEndSent && key == kmsg.EndTxn.Int16():
		h.die()
	}
}

// TestKillNineAtEachPointThenRerunMovesEachOnce: a redrive SIGKILLed at
// each point from the lease's first write to right after a transaction's
// End, then the same redrive run again: every selected record is on the
// tier exactly once, delivered to the app once, and none is waiting.
func TestKillNineAtEachPointThenRerunMovesEachOnce(t *testing.T) {
	for _, point := range []string{killLeaseBuffered, killLeaseWritten, killBeforeFirstTx, killBeforeEnd, killEndSent, killAfterEnd} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t, 2, 50*time.Millisecond)
			c := e.client()
			const n = 6
			snap := deadLetter(t, e, c, n)
			lines := runKilledHelper(t, e, point)
			res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
			if err != nil {
				t.Fatalf("rerun: %v", err)
			}
			t.Logf("killed at %s after %q; the rerun moved %d", point, lines, res.Moved)
			for _, en := range snap.Entries {
				eventually(t, en.ID+" acknowledged", func() bool { return e.app.ackedCount(en.ID) >= 1 })
			}
			seen := map[string]int{}
			for _, r := range readAll(t, e, e.plan.Tiers[0].Topic) {
				if o, err := retrytopics.ReadOrigin(r, false, 0); err == nil && o.Redrives == 1 && o.Attempts == 0 {
					seen[o.ID()]++
				}
			}
			for _, en := range snap.Entries {
				if seen[en.ID] != 1 || e.app.ackedCount(en.ID) != 1 {
					t.Errorf("%s: %d copies on the tier, acknowledged %d times; want 1 and 1", en.ID, seen[en.ID], e.app.ackedCount(en.ID))
				}
			}
			if got := len(e.app.redriven()); got != n {
				t.Errorf("%d redriven deliveries, want %d", got, n)
			}
			if st := dlq.StatsOf(mustRead(t, c).Entries); st.Waiting != 0 || st.Redriven != n {
				t.Errorf("stats %+v, want 0 waiting, %d redriven", st, n)
			}
		})
	}
}

// runKilledHelper runs the helper redrive with a kill point and waits for
// it to die of SIGKILL; it returns what the helper printed.
func runKilledHelper(t *testing.T, e *env, point string) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join([]string{strings.Join(e.addrs, ","), e.plan.Source, e.plan.DLQ, e.plan.Tiers[0].Topic, point}, "|"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for sc := bufio.NewScanner(out); sc.Scan(); {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the helper was not killed at %s: %v, printed %q", point, err, lines)
	}
	return lines
}
