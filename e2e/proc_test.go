package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/internal/testlog"
)

// kretryBin is the binary under test, built once by TestMain.
var kretryBin string

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "kretry-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	kretryBin = filepath.Join(dir, "kretry")
	if err := build(kretryBin); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building kretry:", err)
		return 1
	}
	return kafkatest.RunMain(m, func(k kafkatest.Kind) { brokerKind = k })
}

// brokerKind is the broker of the current pass (see internal/kafkatest):
// tests that talk to a broker get it from startBroker.
var brokerKind = kafkatest.Embedded

// brokerIndependent skips the test in the real-Kafka pass: it talks to no
// broker, or only to the embedded one on purpose, and ran in the embedded
// pass.
func brokerIndependent(t *testing.T) {
	t.Helper()
	if brokerKind != kafkatest.Embedded {
		t.Skip("broker-independent: ran in the embedded pass")
	}
}

// build compiles ./cmd/kretry from the module root into out, with -race
// when the tests themselves run with it.
func build(out string) error { return buildKretry(out, raceBuild) }

// buildKretry compiles ./cmd/kretry from the module root into out, with
// -race when race.
func buildKretry(out string, race bool) error {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" {
		return errors.New("go env GOMOD: not inside a module")
	}
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/kretry")...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w\n%s", err, b)
	}
	return nil
}

// cleanEnv is the test's environment without KRETRY_ variables, so that a
// developer's overrides do not leak into the subprocesses.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KRETRY_") {
			env = append(env, kv)
		}
	}
	if _, set := os.LookupEnv("GORACE"); raceBuild && !set {
		// A race-enabled binary sleeps 1s (atexit_sleep_ms) on every
		// exit 0 so late race reports can come in; 100ms is plenty here.
		env = append(env, "GORACE=atexit_sleep_ms=100")
	}
	return append(env, extra...)
}

// proc is a kretry subprocess. Its output is logged only when the test
// fails; the process is killed at the end of the test if still running.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout testlog.Buffer
	stderr testlog.Buffer
	done   chan struct{}
	err    error // of cmd.Wait, valid once done is closed
}

// startKretry starts the binary with args. name labels its output in the
// test log.
func startKretry(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startKretryEnv(t, name, nil, args...)
}

// startKretryEnv is startKretry with extra environment variables.
func startKretryEnv(t *testing.T, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(kretryBin, args...), done: make(chan struct{})}
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting kretry %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s (kretry %s) exit: %v\nstdout:\n%s\nstderr:\n%s", p.name, strings.Join(args, " "), p.err, p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to timeout for the exit; it returns the
// exit status, or fails the test if the process does not exit in time.
func (p *proc) stop(t *testing.T, timeout time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !p.exited() {
		t.Fatalf("%s: SIGTERM: %v", p.name, err)
	}
	return p.wait(t, timeout)
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	p.wait(t, 10*time.Second)
}

func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		// SIGQUIT makes a Go process print every goroutine's stack to
		// stderr, which the cleanup logs: where it hung.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
		}
		t.Fatalf("%s did not exit within %v (goroutine dump in its stderr below)", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// mustRun fails the test if the process has exited: used while waiting
// for something it should do.
func (p *proc) mustRun(t *testing.T) {
	t.Helper()
	if p.exited() {
		t.Fatalf("%s exited early: %v", p.name, p.err)
	}
}

// runKretry runs the binary to completion (at most timeout) with extra
// environment variables and returns its stdout, stderr and exit status.
func runKretry(t *testing.T, timeout time.Duration, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, kretryBin, args...)
	cmd.Env = cleanEnv(env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("kretry %s: no exit within %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), timeout, o.String(), e.String())
	case err != nil && !errors.As(err, &ee):
		t.Fatalf("kretry %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// waitFor polls cond every 50ms until it holds or timeout passes; then it
// fails the test naming what it waited for. check, when set, runs on every
// poll and may fail the test early (a subprocess that died).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool, check ...func()) {
	t.Helper()
	if !poll(timeout, func() bool {
		if cond() {
			return true
		}
		for _, c := range check {
			c()
		}
		return false
	}) {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// poll calls cond every 50ms until it returns true (poll returns true) or
// timeout passes (false).
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitTCP waits until addr accepts TCP connections.
func waitTCP(t *testing.T, p *proc, addr string) {
	t.Helper()
	waitFor(t, 15*time.Second, "a listener on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}, func() { p.mustRun(t) })
}

// startBroker returns a broker of the current pass for this test and its
// address: `kretry broker` on a free port with its data under a temporary
// dir, once it accepts connections, or a new Apache Kafka node (then the
// proc is nil).
func startBroker(t *testing.T) (*proc, string) {
	t.Helper()
	if brokerKind == kafkatest.Kafka {
		return nil, kafkatest.New(t, kafkatest.Config{}).Addrs()[0]
	}
	addr := freeAddr(t)
	p := startKretry(t, "broker", "broker", "--listen", addr, "--data-dir", filepath.Join(t.TempDir(), "data"))
	waitTCP(t, p, addr)
	return p, addr
}

// runConfig is what a test varies in the config of `kretry run`.
type runConfig struct {
	Broker      string
	AppURL      string
	Tiers       []string
	MaxInFlight int    // 0 keeps the default
	Ordering    string // "" keeps the default
	// NoGuard turns the systemic-failure guard off (guard.enabled: false),
	// for tests that dead-letter many records of many keys on purpose.
	NoGuard bool
}

// writeConfig writes a config for `kretry run` into a temporary dir and
// returns its path. One topic, orders, with its default group, tier and
// DLQ names; jitter 0 so delays are exact; no metrics endpoint.
func writeConfig(t *testing.T, c runConfig) string {
	t.Helper()
	var b strings.Builder
	// 6s is the embedded broker's minimum session timeout: a killed
	// instance's partitions move after 6s instead of 45s.
	fmt.Fprintf(&b, "kafka:\n  brokers: [%q]\n  fetch_max_wait: 50ms\n  session_timeout: 6s\n", c.Broker)
	fmt.Fprintf(&b, "app:\n  url: %q\n  timeout: 5s\n", c.AppURL)
	if c.MaxInFlight > 0 {
		fmt.Fprintf(&b, "  max_in_flight: %d\n", c.MaxInFlight)
	}
	b.WriteString("metrics:\n  listen: \"\"\n")
	b.WriteString("log:\n  level: info\n")
	b.WriteString("topics:\n  - name: orders\n")
	if c.Ordering != "" {
		fmt.Fprintf(&b, "    ordering: %s\n", c.Ordering)
	}
	if c.NoGuard {
		b.WriteString("    guard: {enabled: false}\n")
	}
	b.WriteString("    retry:\n")
	fmt.Fprintf(&b, "      tiers: [%s]\n      jitter: 0\n", strings.Join(c.Tiers, ", "))
	return writeYAML(t, b.String())
}

// id is the CloudEvents id of a source record.
func id(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.FormatInt(int64(partition), 10) + "/" + strconv.FormatInt(offset, 10)
}
