package containers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
)

// TestCrashAndRestartOnTestcontainersKafka: kretry run against a
// testcontainers Kafka, kill -9 and an immediate restart under the same
// kafka.instance_id; every record is acknowledged and the restarted
// instance delivers again within 5s (static membership).
func TestCrashAndRestartOnTestcontainersKafka(t *testing.T) {
	t.Log("needs a Docker engine for testcontainers; without one it skips (the real-Kafka suites run without Docker through internal/kafkatest)")
	testcontainers.SkipIfProviderIsNotHealthy(t)
	ctx := context.Background()
	kc, err := tckafka.Run(ctx, "confluentinc/confluent-local:7.5.0", tckafka.WithClusterID("kretry-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testcontainers.TerminateContainer(kc) })
	brokers, err := kc.Brokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	acked := map[string]time.Time{}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := delivery.MessageFromRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		if _, ok := acked[string(m.Value)]; !ok {
			acked[string(m.Value)] = time.Now()
		}
		mu.Unlock()
	}))
	defer app.Close()

	bin := buildKretry(t)
	cfg := filepath.Join(t.TempDir(), "kretry.yaml")
	body := fmt.Sprintf("kafka: {brokers: [%q], instance_id: tc-0}\napp: {url: %q}\nmetrics: {listen: \"\"}\ntopics: [{name: orders, retry: {tiers: [1s]}}]\n", brokers[0], app.URL)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "-c", cfg)
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	produce := func(prefix string) []string {
		var vs []string
		for i := range 6 {
			v := fmt.Sprintf("%s%d", prefix, i)
			vs = append(vs, v)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte(v), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		return vs
	}
	waitAcked := func(vs []string, within time.Duration) time.Time {
		deadline := time.Now().Add(within)
		for {
			mu.Lock()
			var last time.Time
			all := true
			for _, v := range vs {
				at, ok := acked[v]
				all = all && ok
				if at.After(last) {
					last = at
				}
			}
			mu.Unlock()
			if all {
				return last
			}
			if time.Now().After(deadline) {
				t.Fatalf("not every record of %v acknowledged within %v", vs, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	first := start()
	waitAcked(produce("a"), 60*time.Second)
	_ = first.Process.Kill()
	_ = first.Wait()
	restarted := time.Now()
	start()
	last := waitAcked(produce("b"), 60*time.Second)
	took := last.Sub(restarted)
	t.Logf("restarted instance delivered every partition %v after the restart", took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("the restart took %v: static membership did not give the partitions back", took)
	}
}

// buildKretry builds ../../cmd/kretry into a temporary dir.
func buildKretry(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "kretry")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/kretry")
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building kretry: %v\n%s", err, b)
	}
	return out
}
