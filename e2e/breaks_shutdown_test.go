package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSigtermWhileStarting: SIGTERM at any moment of the start (checking
// the broker, creating the topics, joining the group, before the first
// assignment) is a clean stop: exit 0 within a few seconds, with no error
// line.
func TestSigtermWhileStarting(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	app := startStampApp(t)
	for i, after := range []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond} {
		cfg := identityConfig(t, addr, app.url())
		p := startKretryEnv(t, fmt.Sprintf("run#%d", i), []string{fmt.Sprintf("KRETRY_KAFKA__INSTANCE_ID=start-%d", i)}, "run", "-c", cfg)
		// Until its first log line the process may not have its signal
		// handlers yet: a SIGTERM then ends it by the default action
		// (nothing started, nothing to lose). Count from that line.
		waitFor(t, 30*time.Second, "kretry starting", func() bool { return strings.Contains(p.stderr.String(), "kretry starting") }, func() { p.mustRun(t) })
		time.Sleep(after)
		start := time.Now()
		code := p.stop(t, 30*time.Second)
		took := time.Since(start)
		errLines := 0
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if strings.Contains(l, "level=ERROR") {
				errLines++
			}
		}
		t.Logf("SIGTERM %v after the start: exit %d after %v", after, code, took.Round(time.Millisecond))
		if code != 0 || errLines > 0 {
			t.Errorf("SIGTERM %v after the start: exit %d, %d error lines, want 0 and none:\n%s", after, code, errLines, p.stderr.String())
		}
		if took > 10*time.Second {
			t.Errorf("SIGTERM %v after the start: the exit took %v", after, took)
		}
	}
}

// TestSigtermWhileJoiningLeavesNoGhost: a second instance (its own
// kafka.instance_id) gets SIGTERM while its JoinGroup is under way (the
// first seconds, before its first assignment). Its static member must not
// stay in the group: a member that joined and is then never heard of again
// is given partitions by the next assignment and holds them until the
// session timeout (45s by default), during which their records wait.
func TestSigtermWhileJoiningLeavesNoGhost(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 4)
	app := startStampApp(t)
	cfg := identityConfig(t, addr, app.url())
	cl := newClient(t, addr)
	a := startKretryEnv(t, "a", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-a"}, "run", "-c", cfg)
	produceValues(t, cl, seq("a", 8)...)
	app.waitAcked(t, 60*time.Second, seq("a", 8), func() { a.mustRun(t) })
	for i, after := range []time.Duration{60 * time.Millisecond, 100 * time.Millisecond, 140 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1500 * time.Millisecond} {
		b := startKretryEnv(t, fmt.Sprintf("b#%d", i), []string{"KRETRY_KAFKA__INSTANCE_ID=pod-b"}, "run", "-c", cfg)
		// Count from the first log line: before it the signal handlers may
		// not be installed (see TestSigtermWhileStarting).
		waitFor(t, 30*time.Second, "kretry starting", func() bool { return strings.Contains(b.stderr.String(), "kretry starting") }, func() { b.mustRun(t) })
		time.Sleep(after)
		if code := b.stop(t, 30*time.Second); code != 0 {
			t.Errorf("b#%d exited %d after SIGTERM, want 0", i, code)
		}
		joined := strings.Contains(b.stderr.String(), `msg="partitions assigned"`)
		stop := time.Now()
		vs := seq(fmt.Sprintf("b%d-", i), 8)
		produceValues(t, cl, vs...)
		last := app.waitAcked(t, 90*time.Second, vs, func() { a.mustRun(t) })
		took := last.Sub(stop)
		t.Logf("broker %s: SIGTERM %v after b's start (b assigned before it: %v); a delivered every partition %v after b's exit",
			brokerKind, after, joined, took.Round(time.Millisecond))
		if took > 15*time.Second {
			t.Errorf("SIGTERM %v after b's start: records waited %v: b's static member stayed in the group after its exit (session timeout 45s)", after, took.Round(time.Millisecond))
		}
	}
}
