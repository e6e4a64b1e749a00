package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/internal/kafkatest"
)

// outageLogFor is how long the broker stays down in TestBrokerOutageLog:
// past one window of the client's repeat filter (30s), so that a line
// still repeating is shown again with its count.
const outageLogFor = 40 * time.Second

// TestBrokerOutageLog: the only broker is down for 40s while kretry runs.
// Its log must stay readable: the Kafka client's lines that repeat (same
// level, message, broker, topic and error) are shown at most once per 30s
// window with the count held back, not several times a second (an on-call
// walk-through counted about 150 such lines in 40s). Nothing is lost.
func TestBrokerOutageLog(t *testing.T) {
	t.Parallel()
	var kill, back func()
	addr := ""
	if brokerKind == kafkatest.Kafka {
		c := kafkatest.New(t, kafkatest.Config{})
		addr = c.Addrs()[0]
		kill = func() { must(t, c.Kill(1)) }
		back = func() { must(t, c.Restart(context.Background(), 1)) }
	} else {
		addr = freeAddr(t)
		dir := filepath.Join(t.TempDir(), "data")
		var b *proc
		start := func() {
			b = startKretry(t, "broker", "broker", "--listen", addr, "--data-dir", dir)
			waitTCP(t, b, addr)
		}
		start()
		kill = func() { b.kill(t) }
		back = start
	}
	r := newLedgerRun(t, []string{addr}, 3, 1)
	run := startKretryEnv(t, "run", []string{"KRETRY_KAFKA__INSTANCE_ID=pod-0", "KRETRY_LOG__FORMAT=json"}, "run", "-c", r.config())
	r.produce(300)
	waitFor(t, 60*time.Second, "a third of the records settled", func() bool { return r.settledCount() > 100 }, func() { run.mustRun(t) })
	kill()
	time.Sleep(outageLogFor) // the outage itself: what is measured is the log it causes
	back()
	r.watchDLQ()
	r.verify(func() { run.mustRun(t) })
	if code := run.stop(t, 30*time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}

	counts, total, held := clientLines(t, run.stderr.String())
	t.Logf("broker %s: %d Kafka client lines over a %v outage, %d kinds, %d lines held back", brokerKind, total, outageLogFor, len(counts), held)
	if held == 0 {
		t.Error("no line carries repeated=N: the lines held back are not counted where the operator sees them")
	}
	// Each kind is shown at most once per 30s window: twice in the 40s
	// outage, and once more for the window the restart falls in.
	for _, c := range counts {
		t.Logf("%4d× %s", c.n, c.kind)
		if c.n > 3 {
			t.Errorf("%q logged %d times, want at most 3 (once per 30s window)", c.kind, c.n)
		}
	}
}

type kindCount struct {
	kind string
	n    int
}

// clientLines counts the Kafka client's JSON log lines (component
// kafka-client) by level, message, broker, topic and error (the kinds
// README names, ports aside: one test has one broker address), most
// frequent first,
// and sums the counts of lines held back that they carry (repeated).
func clientLines(t *testing.T, stderr string) (kinds []kindCount, total, held int) {
	t.Helper()
	by := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(stderr))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l map[string]any
		if json.Unmarshal(sc.Bytes(), &l) != nil || l["component"] != "kafka-client" {
			continue
		}
		total++
		if n, ok := l["repeated"].(float64); ok {
			held += int(n)
		}
		by[fmt.Sprintf("%v %v broker=%v topic=%v err=%v", l["level"], l["msg"], l["broker"], l["topic"], l["err"])]++
	}
	for k, n := range by {
		kinds = append(kinds, kindCount{k, n})
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].n > kinds[j].n })
	return kinds, total, held
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
