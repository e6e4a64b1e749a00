// Command bench measures kretry against the consumers a user would pick
// instead, on the embedded broker and on Apache Kafka, in one run (issues 5
// and 10). It lives in its own module so that Watermill, watermill-kafka
// and IBM/sarama stay out of kretry's go.mod. From the repository root:
//
//	cd e2e/bench && go run . [-broker embedded|kafka|both] [-records N] [-quick] [-scale]
//
// Peers, all against the same application logic and workload:
//
//	bare         (a) franz-go group consumer, one loop calling the handler, autocommit
//	blocking     (b) franz-go, one goroutine per partition, retries in place with backoff, DLQ
//	watermill    (c) Watermill Router + Retry + PoisonQueue on watermill-kafka (sarama)
//	kretry       (d) kretry engine in-process (delivery.HandlerFunc, ordering key)
//	kretry-http  (e) kretry engine over HTTP to a local net/http app
//	bare-post    (f) franz-go consume-and-POST loop, same MaxInFlight and HTTP transport
//	spring-retry (g) Spring Kafka non-blocking retries (retry topics + DLT), a JVM subprocess; Kafka only
//	spring-block (h) Spring Kafka DefaultErrorHandler, backoff in place + DeadLetterPublishingRecoverer; Kafka only
//
// Each (workload, peer) run gets a fresh broker on the embedded site (a
// child process of this binary unless -inproc-broker) or fresh topics on
// the one Kafka 4.1.1 node of the Kafka site (internal/kafkatest), a
// backlog of -records records (throughput and CPU) and then -paced records
// produced at -rate records/s (latency and retry lateness). -scale runs the
// scale scenario instead (scale.go). docs/PERFORMANCE.md explains every
// figure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

var peers = []*peer{
	{name: "bare", desc: "(a) bare franz-go group consumer loop, autocommit; drops failures", baseline: "bare", start: startBare},
	{name: "blocking", desc: "(b) blocking retry in place, one goroutine per partition, backoff 100/200/400ms, DLQ", baseline: "bare", start: startBlocking},
	{name: "watermill", desc: "(c) Watermill Router + Retry + PoisonQueue on watermill-kafka (sarama)", baseline: "bare", start: startWatermill},
	{name: "kretry", desc: "(d) kretry engine in-process, HandlerFunc, ordering key, tiers 100/200/400ms", baseline: "bare", start: startKretry},
	{name: "kretry-http", desc: "(e) kretry engine over HTTP to a local net/http app", baseline: "bare-post", start: startKretryHTTP},
	{name: "bare-post", desc: "(f) bare consume-and-POST loop, same MaxInFlight and HTTP deliverer; drops failures", baseline: "bare-post", start: startBarePost},
	{name: "spring-retry", desc: "(g) Spring Kafka 4.1 non-blocking retries: retry topics 100/200/400ms + DLT (JVM; Kafka only)", baseline: "bare", start: startSpring("retry-topic"), jvm: true},
	{name: "spring-block", desc: "(h) Spring Kafka 4.1 DefaultErrorHandler: backoff 100/200/400ms in place + DLT (JVM; Kafka only)", baseline: "bare", start: startSpring("blocking"), jvm: true},
}

// runs reports whether peer p runs workload w on site s: issue 3's 1%-keys
// variant is about kretry; the blocking consumers run it too, for
// contrast. The Spring peers run on Kafka only (issue 10 asks for them
// there; kafka-clients on kfake is not what a user runs).
func runs(w *workload, p *peer, s *site) bool {
	if p.jvm && s.kind != siteKafka {
		return false
	}
	if w.name == "1%-keys" {
		return p.name == "kretry" || p.name == "blocking" || p.name == "kretry-http" || p.name == "spring-block"
	}
	return true
}

func main() {
	f := defineFlags()
	flag.Parse()
	if *f.serve {
		if err := serveBroker(*f.parts); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	cfg, kinds, err := f.config()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *f.cpuprofile != "" {
		pf, err := os.Create(*f.cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(pf)
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *f.scale {
		err = runScale(ctx, cfg, kinds, *f.scaleParts, *f.scaleKeys, *f.scaleRecs, *f.scaleLimit, *f.scaleCases)
	} else {
		err = run(ctx, cfg, kinds, split(*f.peerList), split(*f.wlList), !*f.noMem)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg *config, kinds []string, onlyPeers, onlyWorkloads []string, mem bool) error {
	start := time.Now()
	fmt.Printf("    kretry bench: %d backlog + %d paced records per run at %.0f records/s, %d partitions, %d keys, MaxInFlight %d, tiers/backoff %v\n",
		cfg.records, cfg.paced, cfg.rate, partitions, numKeys, cfg.maxInFlight, cfg.tiers)
	if cfg.deep > 0 {
		fmt.Printf("    deep runs (kretry, kretry-http; slow-key, 1%%-keys and their healthy neighbours): %d backlog + %d paced records\n", cfg.deep, cfg.paced)
	}
	fmt.Printf("    machine: %s\n", machine())
	for _, p := range peers {
		if len(onlyPeers) == 0 || slices.Contains(onlyPeers, p.name) {
			fmt.Printf("      %-12s %s\n", p.name, p.desc)
		}
	}
	for _, kind := range kinds {
		if err := runTable(ctx, cfg, kind, onlyPeers, onlyWorkloads, mem); err != nil {
			return err
		}
	}
	fmt.Printf("\n    total %.0fs\n", time.Since(start).Seconds())
	return nil
}

// runTable runs every (workload, peer) on one broker kind and prints its
// table.
func runTable(ctx context.Context, cfg *config, kind string, onlyPeers, onlyWorkloads []string, mem bool) error {
	s, err := openSite(ctx, kind, cfg.inproc)
	if err != nil {
		return err
	}
	defer s.close()
	t0 := time.Now()
	fmt.Printf("\n#### broker: %s\n\n    %s\n    load before: %s\n\n", kind, s.describe(), loadAvg())
	ws := chosen(workloads, onlyWorkloads, func(w *workload) string { return w.name })
	ps := chosen(peers, onlyPeers, func(p *peer) string { return p.name })
	plans := map[planKey]*plan{}
	var results []*result
	for _, st := range schedule(ws, ps, cfg.adjacent, cfg.deep > 0) {
		if !runs(st.w, st.p, s) {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		results = append(results, runStep(ctx, cfg, s, kind, st, plans))
	}
	linkBaselines(results)
	var m *memResult
	if mem && (len(onlyPeers) == 0 || slices.Contains(onlyPeers, "kretry")) {
		m = tableMemory(ctx, cfg, s, kind)
	}
	report(os.Stdout, cfg, s, results, m)
	fmt.Printf("\n    load after: %s; table took %.0fs\n", loadAvg(), time.Since(t0).Seconds())
	return nil
}

// chosen is those of all whose names are in only, or all when only is
// empty, in all's order.
func chosen[T any](all []T, only []string, name func(T) string) []T {
	var out []T
	for _, x := range all {
		if len(only) == 0 || slices.Contains(only, name(x)) {
			out = append(out, x)
		}
	}
	return out
}

// planKey names a plan: one per workload and backlog depth.
type planKey struct {
	w    *workload
	deep bool
}

// runStep runs one step of the table's schedule, on the plan of its
// workload and depth (made the first time), and logs it to stderr.
func runStep(ctx context.Context, cfg *config, s *site, kind string, st step, plans map[planKey]*plan) *result {
	pk := planKey{st.w, st.deep}
	if plans[pk] == nil {
		backlog := cfg.records
		if st.deep {
			backlog = cfg.deep
		}
		plans[pk] = newPlan(st.w, backlog, cfg.paced)
	}
	label := st.w.name
	if st.adjacentHealthy {
		label = "healthy*"
	}
	if st.deep {
		label += "+"
	}
	fmt.Fprintf(os.Stderr, "%-8s %-9s %-12s … ", kind, label, st.p.name)
	t := time.Now()
	r, err := runOne(ctx, cfg, s, st.w, plans[pk], st.p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		r = &result{w: st.w, p: st.p, err: err}
	} else {
		fmt.Fprintf(os.Stderr, "%.0f rec/s, p99 %s, join %s (%.1fs) %s\n", r.recPerSec, ms(r.p99), ms(r.joinDelay), time.Since(t).Seconds(), r.txns)
	}
	r.bracketed, r.adjacentHealthy, r.deep, r.backlog = st.bracketed, st.adjacentHealthy, st.deep, plans[pk].backlog
	return r
}

// tableMemory measures memory per blocked key and parked record (memory.go)
// on the table's broker; nil when it failed (the error is logged).
func tableMemory(ctx context.Context, cfg *config, s *site, kind string) *memResult {
	keys, perKey := 2000, 5
	if cfg.records < 20000 {
		keys, perKey = 500, 4
	}
	fmt.Fprintf(os.Stderr, "%-8s memory: %d blocked keys × %d parked records … ", kind, keys, perKey)
	m, err := measureMemory(ctx, s, keys, perKey, cfg.log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return nil
	}
	fmt.Fprintln(os.Stderr, "done")
	return m
}

// loadAvg is the machine's load average, as uptime prints it (the
// machine is shared: a loaded one makes every figure worse).
func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return fmt.Sprintf("load average %s, %s, %s (1, 5, 15 min)", f[0], f[1], f[2])
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/1e6)
}

// machine describes the machine and the commit the run measures.
func machine() string {
	return fmt.Sprintf("%d CPUs (GOMAXPROCS %d), %s memory, %s %s/%s; commit %s", runtime.NumCPU(), runtime.GOMAXPROCS(0),
		memTotal(), runtime.Version(), runtime.GOOS, runtime.GOARCH, commit())
}

// commit is the repository's HEAD (git), marked when the work tree has
// changes.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=10", "HEAD").Output()
	if err != nil {
		return "unknown (no git)"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " with uncommitted changes"
	}
	return c
}

func memTotal() string {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "?"
	}
	var kb int64
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "MemTotal:") {
			fmt.Sscanf(strings.TrimPrefix(line, "MemTotal:"), "%d", &kb)
		}
	}
	return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
}
