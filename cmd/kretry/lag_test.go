package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lagEnv is an embedded broker holding a kretry pipeline (orders, one
// tier, DLQ) and a config file pointing at it.
func lagEnv(t *testing.T, withTier bool) string {
	t.Helper()
	topics := []string{"orders", "orders.dlq", "orders.parking"}
	if withTier {
		topics = append(topics, "orders.retry.1m")
	}
	b, cl, adm := testCluster(t, 2, topics...)
	addr := b.Addrs()[0]
	ctx := context.Background()
	old := time.Now().Add(-90 * time.Second)
	for i := range 5 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: 0, Value: fmt.Appendf(nil, "v%d", i), Timestamp: old}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var os kadm.Offsets
	os.AddOffset("orders", 0, 2, -1)
	if err := adm.CommitAllOffsets(ctx, "orders-kretry", os); err != nil {
		t.Fatal(err)
	}
	return lagConfig(t, addr)
}

// lagConfig writes a config of one topic, orders with the 1m tier, on the
// embedded broker at addr, with a status window of 2 scans; it returns
// its path.
func lagConfig(t *testing.T, addr string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, path, fmt.Sprintf(`
embedded: {listen: %q}
app: {url: http://127.0.0.1:8080/kafka}
lag: {window: 2, timeout: 3s}
topics:
  - name: orders
    retry: {tiers: [1m]}
`, addr))
	return path
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLagCommandTable(t *testing.T) {
	path := lagEnv(t, true)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"lag", "-c", path}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	s := out.String()
	for _, want := range []string{
		"GROUP          STATE  MEMBERS  STATUS  ERROR",
		"orders-kretry  Empty  0        OK",
		"orders-kretry  orders           1          source   -          0          0    0    0s     OK      no commit (from log start)",
		"orders-kretry  orders.retry.1m  0          tier-1",
		"orders-kretry  orders.parking   1          parking",
		"DLQ         PARTITION  SOURCE  FROM       END  OFFSETS  AGE  NOTE",
		"orders.dlq  0          orders  log start  0    0        0s",
		"the records still waiting: kretry dlq stats -c " + path + " --topic orders\n", // pasted as printed, it runs
		"the status needs 2 (--watch)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q", want)
		}
	}
	// The age is about 90s: the records were written 90s before the scan.
	// One scan: a partition with lag has no verdict yet ("-", not OK).
	if !regexp.MustCompile(`(?m)^orders-kretry  orders           0          source   2          0          5    3    1m3[0-9]s  -\s*$`).MatchString(s) {
		t.Error("no row for orders[0] with lag 3, an age of 1m3Xs and no status yet (-)")
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", s)
	}
}

func TestLagCommandJSONWatch(t *testing.T) {
	path := lagEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"lag", "-c", path, "--json", "--watch", "--interval", "200ms"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var scans []map[string]any
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		scans = append(scans, m)
	}
	if len(scans) < 3 {
		t.Fatalf("%d scans in 1.5s at 200ms", len(scans))
	}
	last := scans[len(scans)-1]
	var found bool
	for _, r := range last["rows"].([]any) {
		row := r.(map[string]any)
		if row["topic"] == "orders" && row["partition"] == 0.0 {
			found = true
			// The window is full and the commit stood still with lag: STOP.
			if row["lag"] != 3.0 || row["status"] != "STOP" || row["age_seconds"].(float64) < 90 {
				t.Errorf("row = %v", row)
			}
		}
	}
	if !found {
		t.Errorf("no orders[0] row in %v", last)
	}
}

func TestLagCommandMissingTopic(t *testing.T) {
	path := lagEnv(t, false)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"lag", "-c", path}, &out, &errb)
	// The problem is printed once, under Problems; stderr says the scan is
	// incomplete without repeating it.
	if code != exitFail || strings.Count(out.String()+errb.String(), `topic "orders.retry.1m"`) != 1 ||
		!strings.Contains(out.String(), "Problems:") || !strings.Contains(errb.String(), "incomplete scan: 1 problem(s)") {
		t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
}

func TestLagCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"lag"},
		{"lag", "-c", "x.yaml", "extra"},
		{"lag", "-c", "x.yaml", "--interval", "1ms"},
	} {
		t.Setenv("KRETRY_CONFIG", "")
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (%s)", args, code, exitUsage, errb.String())
		}
	}
}

// TestLagIntervalHint: an --interval that is not a Go duration says how to
// write one; a count of days, the hours it means.
func TestLagIntervalHint(t *testing.T) {
	for in, want := range map[string]string{
		"5":  `use a Go duration such as "5s"`,
		"7d": `a Go duration has no day unit, write "168h"`,
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"lag", "-c", "x.yaml", "--interval", in}, &out, &errb); code != exitUsage {
			t.Errorf("--interval %s: exit %d, want %d", in, code, exitUsage)
		}
		if !strings.Contains(errb.String(), want) {
			t.Errorf("--interval %s: stderr %q lacks %q", in, errb.String(), want)
		}
	}
}

// TestLagCommandInstance: --metrics names an instance; its breaker,
// limit, retry share and top failures are printed; one that cannot be
// read is a problem of the scan (exit 1); --metrics none reads none; a
// bad address is a usage error.
func TestLagCommandInstance(t *testing.T) {
	path := lagEnv(t, true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `kretry_breaker_state{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 2
kretry_breaker_opened_total{kretry_reason="dependency",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 4
kretry_delivery_limit{kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 3
kretry_deliveries_total{kretry_source="orders",kretry_stage="source",messaging_consumer_group_name="orders-kretry"} 30
kretry_deliveries_total{kretry_source="orders",kretry_stage="tier-1",messaging_consumer_group_name="orders-kretry"} 10
kretry_delivery_failures_total{error_type="503",kretry_error_class="transient",kretry_error_fingerprint="status #: busy",kretry_source="orders",messaging_consumer_group_name="orders-kretry"} 12
`)
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"lag", "-c", path, "--metrics", strings.TrimPrefix(srv.URL, "http://")}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	for _, want := range []string{
		"Pipelines, from the brokers (rates need two scans (--watch)):",
		"orders  orders-kretry  3    1m3", // orders' lag, the tier empty; the oldest about 90s
		"Instance " + srv.URL + "/metrics, its own partitions:",
		"orders  orders-kretry  probing  4 dependency  0     3      0          25% (since start)  off",
		"orders  12     transient  503   status #: busy",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q", want)
		}
	}
	if t.Failed() {
		t.Logf("stdout:\n%s", out.String())
	}

	out.Reset()
	errb.Reset()
	gone := "127.0.0.1:1"
	if code := run(context.Background(), []string{"lag", "-c", path, "--metrics", gone}, &out, &errb); code != exitFail ||
		!strings.Contains(out.String(), "Problems:") || !strings.Contains(out.String(), "metrics http://"+gone+"/metrics") {
		t.Errorf("an instance named by --metrics that cannot be read: exit %d, want %d with the problem listed\nstdout:\n%s", code, exitFail, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"lag", "-c", path, "--metrics", "none"}, &out, &errb); code != exitOK || strings.Contains(out.String(), "Instance ") {
		t.Errorf("--metrics none: exit %d, and an instance section:\n%s", code, out.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"lag", "-c", path, "--metrics", "ftp://x"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), `--metrics "ftp://x"`) {
		t.Errorf("--metrics ftp://x: exit %d, stderr %q; want %d naming the flag", code, errb.String(), exitUsage)
	}
}

// The hint's config path reads back as itself in a POSIX shell.
func TestShellWord(t *testing.T) {
	for in, want := range map[string]string{
		"config.yaml":           "config.yaml",
		"/etc/kretry/a-b_c.yml": "/etc/kretry/a-b_c.yml",
		"my config.yaml":        "'my config.yaml'",
		"it's.yaml":             `'it'\''s.yaml'`,
		"$HOME/x.yaml":          "'$HOME/x.yaml'",
	} {
		if got := shellWord(in); got != want {
			t.Errorf("shellWord(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestLagNamesATopicNoStageConsumes: a kretry group's commit on a topic
// that is none of its config's stages (a tier since removed from
// retry.tiers, records still in it) is said to be consumed by nothing.
func TestLagNamesATopicNoStageConsumes(t *testing.T) {
	b, cl, adm := testCluster(t, 1, "orders", "orders.dlq", "orders.parking", "orders.retry.1m", "orders.retry.10s")
	addr := b.Addrs()[0]
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders.retry.10s", Value: []byte("waiting")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var os kadm.Offsets
	os.AddOffset("orders", 0, 0, -1)
	os.AddOffset("orders.retry.10s", 0, 0, -1)
	if err := adm.CommitAllOffsets(ctx, "orders-kretry", os); err != nil {
		t.Fatal(err)
	}
	path := lagConfig(t, addr)
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"lag", "-c", path, "--metrics", "none"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !regexp.MustCompile(`(?m)^orders-kretry\s+orders\.retry\.10s\s+0\s+-\s.*not a stage of the config: nothing consumes it`).MatchString(out.String()) {
		t.Errorf("no note on orders.retry.10s:\n%s", out.String())
	}
	if strings.Contains(out.String(), "orders.retry.1m  0          tier-1   -          0          0    0    0s     OK      no commit (from log start), not a stage") {
		t.Errorf("a stage of the config is said to be none:\n%s", out.String())
	}
}
