package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// lagLine is what TestLagShowsOverloadSignals reads of one `kretry lag
// --json` scan.
type lagLine struct {
	Pipelines []struct {
		Source     string   `json:"source"`
		Lag        int64    `json:"lag"`
		Enqueue    *float64 `json:"enqueue_per_second"`
		Drain      *float64 `json:"drain_per_second"`
		RatesKnown bool     `json:"rates_known"`
	} `json:"pipelines"`
	Instances []struct {
		URL        string `json:"url"`
		FromConfig bool   `json:"from_config"`
		Error      string `json:"error"`
		Pipelines  []struct {
			Source   string             `json:"source"`
			Breaker  int                `json:"breaker_state"`
			Opened   map[string]float64 `json:"opened"`
			Failures []struct {
				Type  string  `json:"type"`
				Count float64 `json:"count"`
			} `json:"failures"`
		} `json:"pipelines"`
	} `json:"instances"`
}

// TestLagShowsOverloadSignals: while the app refuses connections the
// breaker is open and records keep arriving; `kretry lag --watch --json`
// (the instance's metrics address taken from the config) shows the
// source's enqueue rate above its drain rate, the breaker open with its
// opening counted, and the refused connections as the top failure; the
// table form shows the same.
func TestLagShowsOverloadSignals(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	produceKeyed(t, addr, 30)
	metricsAddr := freeAddr(t)
	cfg := overloadConfig(t, addr, "http://"+freeAddr(t)+"/kafka", metricsAddr) // nothing listens: refused
	run := startKretry(t, "run", "run", "-c", cfg)
	waitFor(t, 30*time.Second, "the breaker open", func() bool {
		return logCount(run, "breaker open: most recent deliveries failed") == 1
	}, func() { run.mustRun(t) })

	// Records keep arriving at about 50/s while the lag watch runs.
	cl := newClient(t, addr)
	stop := make(chan struct{})
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var rs []*kgo.Record
			for j := range 5 {
				rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "late-%d-%d", i, j), Value: []byte("v")})
			}
			cl.ProduceSync(t.Context(), rs...)
		}
	}()
	watch := startKretry(t, "lag", "lag", "-c", cfg, "--json", "--watch", "--interval", "1s")
	var last lagLine
	waitFor(t, 60*time.Second, "three scans of kretry lag --watch", func() bool {
		lines := strings.Split(strings.TrimSpace(watch.stdout.String()), "\n")
		if len(lines) < 3 {
			return false
		}
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
			t.Fatalf("kretry lag --json line %q: %v", lines[len(lines)-1], err)
		}
		return true
	}, func() { watch.mustRun(t); run.mustRun(t) })
	close(stop)
	<-produced
	watch.stop(t, 10*time.Second)

	if len(last.Pipelines) != 1 || !last.Pipelines[0].RatesKnown {
		t.Fatalf("pipelines %+v, want orders with its rates", last.Pipelines)
	}
	p := last.Pipelines[0]
	if *p.Enqueue < 10 || *p.Drain > *p.Enqueue/2 {
		t.Errorf("orders: enqueue %.1f/s, drain %.1f/s while the breaker is open; want records arriving (about 50/s) faster than twice the drain", *p.Enqueue, *p.Drain)
	}
	if len(last.Instances) != 1 || !last.Instances[0].FromConfig || last.Instances[0].Error != "" || len(last.Instances[0].Pipelines) != 1 {
		t.Fatalf("instances %+v, want one read from metrics.listen", last.Instances)
	}
	ip := last.Instances[0].Pipelines[0]
	if ip.Source != "orders" || ip.Breaker != 1 && ip.Breaker != 2 || ip.Opened["dependency"] < 1 {
		t.Errorf("instance pipeline %+v, want orders' breaker open or probing, opened at least once for dependency", ip)
	}
	if len(ip.Failures) == 0 || ip.Failures[0].Type != "connection" || ip.Failures[0].Count < 10 {
		t.Errorf("top failures %+v, want connection refused first, at least 10 times", ip.Failures)
	}

	out, _, code := runKretry(t, 60*time.Second, nil, "lag", "-c", cfg, "--metrics", metricsAddr)
	for _, want := range []string{"Pipelines, from the brokers (rates need two scans (--watch)):", "SOURCE  GROUP", "Instance http://" + metricsAddr + "/metrics, its own partitions:", "connection"} {
		if !strings.Contains(out, want) {
			t.Errorf("kretry lag's table lacks %q", want)
		}
	}
	if !strings.Contains(out, "OPEN") && !strings.Contains(out, "probing") {
		t.Error("kretry lag's table does not show the breaker open or probing")
	}
	t.Logf("while open: enqueue %.1f/s, drain %.1f/s; kretry lag (exit %d):\n%s", *p.Enqueue, *p.Drain, code, out)
}
