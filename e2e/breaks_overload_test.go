package e2e

// A breaker pass on issue 11's overload controls, whole process: kill -9
// of `kretry run` at the breaker's states (docs/OVERLOAD.md).

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// TestBreakKillDashNineDuringAnOutage: the app refuses connections, then
// answers 503, for longer than the whole tier chain (one tier of 2s) while fresh
// records keep arriving; four records fail first, on four keys (fewer
// than the breaker needs to open), and wait on the last tier; `kretry run` is killed with SIGKILL while its
// breaker is open (records held), restarted, killed again while it
// probes, and restarted. When the app returns every record is
// acknowledged, none is dead-lettered (issue 11: an outage of any length
// dead-letters nothing by itself), the last process's breaker opened and
// closed again (it re-learns), and the group's lag is back to 0.
func TestBreakKillDashNineDuringAnOutage(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	appAddr := freeAddr(t) // nothing listens: connections are refused
	metricsAddr := freeAddr(t)
	cfg := writeYAML(t, instanceYAML(addr, "http://"+appAddr+"/kafka", metricsAddr, "timeout: 2s")+`topics:
  - name: orders
    ordering: key
    retry:
      tiers: [2s]
      jitter: 0
    breaker: {wait: 200ms, max_wait: 2s}
`)
	dlq := readTopic(t, addr, retrytopics.DLQTopic("orders"), nil)

	var mu sync.Mutex
	var ids []string
	producer := newClient(t, addr)
	produce := func(ctx context.Context, rs []*kgo.Record) error {
		if err := producer.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			ids = append(ids, id(r.Topic, r.Partition, r.Offset))
		}
		return nil
	}
	run1 := startKretry(t, "run#1", "run", "-c", cfg)

	// Four records fail first, on four keys: too few to open the breaker
	// (half of a half-full window of 20), so they move to the tier. The
	// records that fail in the moments before the breaker opens would not
	// do: their moves are written with their partition's commit, which
	// waits behind any record of a lower offset that the open breaker
	// holds, and that depends on the order the refusals come back in.
	var seeds []*kgo.Record
	for i := range 4 {
		seeds = append(seeds, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "seed-%d", i), Value: fmt.Appendf(nil, "seed-%d", i)})
	}
	if err := produce(context.Background(), seeds); err != nil {
		t.Fatal(err)
	}
	first := retrytopics.TierTopic("orders", 2*time.Second) // the last tier too
	tier := readTopic(t, addr, first, nil)
	waitFor(t, 60*time.Second, "the 4 first failures in "+first, func() bool { return len(tier.records()) >= len(seeds) }, func() { run1.mustRun(t) })

	// Fresh records arrive all through the outage, 10 every 200ms.
	ctx, stopProducing := context.WithCancel(context.Background())
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ctx.Err() == nil; i++ {
			var rs []*kgo.Record
			for j := range 10 {
				n := i*10 + j
				rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "key-%d", n%97), Value: fmt.Appendf(nil, "order-%d", n)})
			}
			if produce(ctx, rs) != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { stopProducing(); <-produced })

	waitFor(t, 60*time.Second, "run#1: the breaker open and two failed probe rounds (refused)", func() bool {
		return logCount(run1, "breaker open: most recent deliveries failed") >= 1 && logCount(run1, "a probe failed") >= 2
	}, func() { run1.mustRun(t) })
	// The records in the tier come due while the breaker holds them, so
	// that the next process finds them overdue.
	adm := newAdmin(t, addr)
	time.Sleep(3 * time.Second) // the outage goes on past the tier's 2s
	run1.kill(t)                // records held by the open breaker

	run2 := startKretry(t, "run#2", "run", "-c", cfg)
	waitFor(t, 60*time.Second, "run#2: the breaker open", func() bool { return logCount(run2, "breaker open") >= 1 }, func() { run2.mustRun(t) })
	time.Sleep(3 * time.Second) // past the tier's 2s: whatever run#2 moved there is due
	probing := logCount(run2, "breaker probing")
	waitFor(t, 60*time.Second, "run#2: a probe round", func() bool { return logCount(run2, "breaker probing") > probing }, func() { run2.mustRun(t) })
	run2.kill(t) // while probing (or right after)
	t.Logf("before run#3: %s end offset %d", first, endOffset(t, adm, first))

	var up atomic.Bool
	app := startAppOn(t, appAddr, func(*delivery.Message) answer {
		if up.Load() {
			return answer{http.StatusOK, ""}
		}
		return answer{http.StatusServiceUnavailable, "maintenance"}
	})
	run3 := startKretry(t, "run#3", "run", "-c", cfg)
	waitFor(t, 60*time.Second, "run#3: the breaker open and a failed probe round (503)", func() bool {
		return logCount(run3, "breaker open") >= 1 && logCount(run3, "a probe failed") >= 1
	}, func() { run3.mustRun(t) })
	time.Sleep(3 * time.Second) // the outage outlasts the tier chain once more
	stopProducing()
	<-produced
	up.Store(true)
	mu.Lock()
	all := append([]string(nil), ids...)
	mu.Unlock()
	settled := func() bool {
		in := map[string]bool{}
		for _, r := range dlq.records() {
			if o, err := retrytopics.ReadOrigin(r, false, 0); err == nil {
				in[o.ID()] = true
			}
		}
		for _, id := range all {
			if !in[id] && !app.ackedAll([]string{id}) {
				return false
			}
		}
		return true
	}
	waitFor(t, 120*time.Second, fmt.Sprintf("all %d records acknowledged or dead-lettered", len(all)), settled, func() { run3.mustRun(t) })
	waitFor(t, 60*time.Second, "the group's lag on orders back to 0", func() bool { return sourceLag(t, adm) == 0 }, func() { run3.mustRun(t) })

	if n := len(dlq.sync(t)); n != 0 {
		t.Errorf("the DLQ holds %d records after an outage with two kill -9s; an outage must dead-letter nothing", n)
	}
	if code := run3.stop(t, 15*time.Second); code != 0 {
		t.Errorf("run#3 exited %d after SIGTERM, want 0", code)
	}
	if logCount(run3, "breaker closed") < 1 {
		t.Errorf("run#3's breaker never closed after the app returned")
	}
	t.Logf("%d records; %d deliveries; run#3: %d openings, %d failed probe rounds", len(all), len(app.deliveries()),
		logCount(run3, "breaker open: most recent"), logCount(run3, "a probe failed"))
}

// sourceLag is orders' end offsets minus the committed offsets of
// orders-kretry, summed over its partitions; -1 when unknown.
func sourceLag(t *testing.T, adm *kadm.Client) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, "orders")
	if err != nil {
		return -1
	}
	offs, err := adm.FetchOffsets(ctx, "orders-kretry")
	if err != nil {
		return -1
	}
	var lag int64
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := offs.Lookup("orders", o.Partition)
		if !ok {
			lag += o.Offset
			return
		}
		lag += o.Offset - c.At
	})
	return lag
}

// TestBreakWrongPathAfterHealthyTraffic: 300 records are acknowledged,
// then a deploy moves the app's route and it answers 404 to everything
// (the newcomer walk's finding, whole process). The guard stops after
// max_dead_letters (10); its one line names the status, share, window,
// example ce-ids and how to resume; once the app serves the route again
// (same process) delivery resumes, and the records in the DLQ are exactly
// the ones the line and kretry_moves_total say: dead_lettered of them,
// the example ids among them, the held one not.
func TestBreakWrongPathAfterHealthyTraffic(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	var broken atomic.Bool
	app := startApp(t, func(*delivery.Message) answer {
		if broken.Load() {
			return answer{http.StatusNotFound, "404 page not found"}
		}
		return answer{http.StatusOK, ""}
	})
	metricsAddr := freeAddr(t)
	dlq := readTopic(t, addr, retrytopics.DLQTopic("orders"), nil)
	run := startKretry(t, "run", "run", "-c", overloadConfig(t, addr, app.url(), metricsAddr))
	produce := func(prefix string) []string {
		var rs []*kgo.Record
		for i := range 300 {
			rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "%s%d", prefix, i%50), Value: fmt.Appendf(nil, "%s%d", prefix, i)})
		}
		return produceSync(t, newClient(t, addr), rs...)
	}
	healthy := produce("healthy-")
	waitFor(t, 60*time.Second, "300 records acknowledged", func() bool { return app.ackedAll(healthy) }, func() { run.mustRun(t) })
	broken.Store(true)
	after := produce("after-")
	waitFor(t, 60*time.Second, "the guard's line", func() bool { return logCount(run, "guard: the same permanent answer") == 1 }, func() { run.mustRun(t) })
	var line string
	for l := range strings.Lines(run.stderr.String()) {
		if strings.Contains(l, "guard: the same permanent answer") {
			line = l
		}
	}
	for _, want := range []string{"level=ERROR", "status=404", "dead_lettered=10", "share=", "window=1m0s", "example_ids=", "held_id=", "resume="} {
		if !strings.Contains(line, want) {
			t.Errorf("the guard's line lacks %q:\n%s", want, line)
		}
	}
	broken.Store(false)
	acked := func() (n int) {
		for _, id := range after {
			if app.ackedAll([]string{id}) {
				n++
			}
		}
		return n
	}
	waitFor(t, 90*time.Second, "every record acknowledged or dead-lettered", func() bool { return acked()+len(dlq.records()) == 300 }, func() { run.mustRun(t) })
	in := map[string]bool{}
	for _, r := range dlq.sync(t) {
		o, err := retrytopics.ReadOrigin(r, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		in[o.ID()] = true
	}
	if len(in) != 10 {
		t.Errorf("the DLQ holds %d records, want max_dead_letters (10)", len(in))
	}
	ids, held := field(line, "example_ids"), field(line, "held_id")
	for _, id := range strings.Fields(ids) {
		if !in[id] {
			t.Errorf("the guard's line names %s as an example, but it is not in the DLQ (%v)", id, in)
		}
	}
	if held == "" || in[held] {
		t.Errorf("held_id %q: want the record that tripped the guard, not in the DLQ", held)
	}
	if v := gaugeWith(t, metricsAddr, "kretry_moves_total", `kretry_move_kind="dead-letter"`); v != "10" {
		t.Errorf("kretry_moves_total{dead-letter} = %q, want 10, as the DLQ holds", v)
	}
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
}

// field returns the value of key in a logfmt line, unquoted; "" if absent.
func field(line, key string) string {
	_, rest, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	if v, ok := strings.CutPrefix(rest, `"`); ok {
		v, _, _ = strings.Cut(v, `"`)
		return v
	}
	v, _, _ := strings.Cut(rest, " ")
	return strings.TrimSpace(v)
}
