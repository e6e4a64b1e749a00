package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Operator-experience tests (issue 13): the drain and a second signal, the
// data dir lock across processes.

// embeddedConfig writes a `kretry run` config with its own embedded broker
// on listen, its log in dataDir, no metrics endpoint, one topic orders.
func embeddedConfig(t *testing.T, listen, dataDir, appURL string, appTimeout time.Duration) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kretry.yaml")
	body := fmt.Sprintf(`embedded: {listen: %q, data_dir: %q, partitions: 1}
app: {url: %q, timeout: %s}
metrics: {listen: ""}
topics:
  - name: orders
    ordering: none
    retry: {tiers: [1m]}
`, listen, dataDir, appURL, appTimeout)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSecondSignalDuringDrain: SIGTERM while a delivery hangs logs that the
// drain waits for 1 delivery with a 30s grace; a second SIGTERM exits at
// once, non-zero, saying so.
func TestSecondSignalDuringDrain(t *testing.T) {
	t.Parallel()
	got := make(chan struct{}, 1)
	release := make(chan struct{})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then a closed connection cancels r.Context()
		select {
		case got <- struct{}{}:
		default:
		}
		select { // hang until kretry goes away
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() {
		close(release)
		app.Close()
	})
	listen := freeAddr(t)
	cfg := embeddedConfig(t, listen, filepath.Join(t.TempDir(), "data"), app.URL+"/kafka", 30*time.Second)
	p := startKretry(t, "run", "run", "-c", cfg)
	waitFor(t, 30*time.Second, "kretry run to be ready", func() bool { return strings.Contains(p.stderr.String(), "msg=\"ready:") },
		func() { p.mustRun(t) })

	cl, err := kgo.NewClient(kgo.SeedBrokers(listen))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the app got no delivery")
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the shutting-down line", func() bool {
		s := p.stderr.String()
		return strings.Contains(s, "shutting down") && strings.Contains(s, "in_flight=1") && strings.Contains(s, "grace=30s")
	})
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := p.wait(t, 10*time.Second)
	if code != 1 {
		t.Errorf("exit status %d after the second SIGTERM, want 1", code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("exit took %v after the second SIGTERM, want at once", d)
	}
	if !strings.Contains(p.stderr.String(), "second signal while shutting down: exiting now") {
		t.Errorf("stderr does not say why it exits:\n%s", p.stderr.String())
	}
}

// TestDataDirLockedByAnotherProcess: a second `kretry broker`, and a
// `kretry run` with the embedded broker, on a data dir a running `kretry
// broker` holds exit 1 naming the dir and that broker's PID.
func TestDataDirLockedByAnotherProcess(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	addr := freeAddr(t)
	b := startKretry(t, "broker", "broker", "--listen", addr, "--data-dir", dir)
	waitTCP(t, b, addr)
	pid := strconv.Itoa(b.cmd.Process.Pid)

	cfg := embeddedConfig(t, freeAddr(t), dir, "http://127.0.0.1:1/kafka", time.Second)
	for _, args := range [][]string{
		{"broker", "--listen", freeAddr(t), "--data-dir", dir},
		{"run", "-c", cfg},
	} {
		_, stderr, code := runKretry(t, 30*time.Second, nil, args...)
		if code != 1 {
			t.Errorf("kretry %s: exit %d, want 1", args[0], code)
		}
		for _, w := range []string{"data dir " + dir + " is in use by process " + pid} {
			if !strings.Contains(stderr, w) {
				t.Errorf("kretry %s: stderr lacks %q:\n%s", args[0], w, stderr)
			}
		}
	}
	if code := b.stop(t, 15*time.Second); code != 0 {
		t.Errorf("broker exit %d after SIGTERM", code)
	}
	// Unlocked once the holder is gone.
	b2 := startKretry(t, "broker again", "broker", "--listen", addr, "--data-dir", dir)
	waitTCP(t, b2, addr)
}
