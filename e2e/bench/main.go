// Command bench measures kretry against the consumers a user would pick
// instead, on the embedded broker, in one run (issue 5). It lives in its own
// module so that Watermill, watermill-kafka and IBM/sarama stay out of
// kretry's go.mod. From the repository root:
//
//	cd e2e/bench && go run . [-records N] [-quick]
//
// Peers, all against the same application logic and workload:
//
//	bare         (a) franz-go group consumer, one loop calling the handler, autocommit
//	blocking     (b) franz-go, one goroutine per partition, retries in place with backoff, DLQ
//	watermill    (c) Watermill Router + Retry + PoisonQueue on watermill-kafka (sarama)
//	kretry       (d) kretry engine in-process (delivery.HandlerFunc, ordering key)
//	kretry-http  (e) kretry engine over HTTP to a local net/http app
//	bare-post    (f) franz-go consume-and-POST loop, same MaxInFlight and HTTP transport
//
// Each (workload, peer) run gets a fresh broker (a child process of this
// binary unless -inproc-broker), a backlog of -records records (throughput
// and CPU) and then -paced records produced at -rate records/s (latency and
// retry lateness). docs/PERFORMANCE.md explains every figure.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var peers = []*peer{
	{name: "bare", desc: "(a) bare franz-go group consumer loop, autocommit; drops failures", baseline: "bare", start: startBare},
	{name: "blocking", desc: "(b) blocking retry in place, one goroutine per partition, backoff 100/200/400ms, DLQ", baseline: "bare", start: startBlocking},
	{name: "watermill", desc: "(c) Watermill Router + Retry + PoisonQueue on watermill-kafka (sarama)", baseline: "bare", start: startWatermill},
	{name: "kretry", desc: "(d) kretry engine in-process, HandlerFunc, ordering key, tiers 100/200/400ms", baseline: "bare", start: startKretry},
	{name: "kretry-http", desc: "(e) kretry engine over HTTP to a local net/http app", baseline: "bare-post", start: startKretryHTTP},
	{name: "bare-post", desc: "(f) bare consume-and-POST loop, same MaxInFlight and HTTP deliverer; drops failures", baseline: "bare-post", start: startBarePost},
}

// runs reports whether peer p runs workload w: issue 3's 1%-keys variant is
// about kretry; the blocking consumer runs it too, for contrast.
func runs(w *workload, p *peer) bool {
	if w.name == "1%-keys" {
		return p.name == "kretry" || p.name == "blocking" || p.name == "kretry-http"
	}
	return true
}

type config struct {
	records, paced int
	rate           float64
	inproc         bool
	maxInFlight    int
	tiers          []time.Duration
	fetchWait      time.Duration
	log            *slog.Logger
	maxPending     int
	commitIvl      time.Duration
}

func main() {
	var (
		records    = flag.Int("records", 20000, "backlog records per run (throughput and CPU)")
		paced      = flag.Int("paced", 0, "records produced at -rate per run (latency); default records/4")
		rate       = flag.Float64("rate", 2000, "records/s of the paced phase")
		quick      = flag.Bool("quick", false, "3000 backlog records per run (and so 750 paced): about a minute in all")
		inproc     = flag.Bool("inproc-broker", false, "run the broker in this process (its CPU then counts in the peers' CPU)")
		peerList   = flag.String("peers", "", "comma-separated peers to run (default all)")
		wlList     = flag.String("workloads", "", "comma-separated workloads to run (default all)")
		noMem      = flag.Bool("no-memory", false, "skip the memory micro-measure")
		cpuprofile = flag.String("cpuprofile", "", "write a CPU profile of the whole command to this file")
		verbose    = flag.Bool("v", false, "log the peers' warnings")
		maxPending = flag.Int("kretry-max-pending", 0, "engine.Options.MaxPending for the kretry peers (0: the default, max(4096, 32 × MaxInFlight))")
		commitIvl  = flag.Duration("kretry-commit-interval", 0, "engine.Options.CommitInterval for the kretry peers (0: the default, 100ms)")
		fetchWait  = flag.Duration("fetch-wait", 250*time.Millisecond, "fetch max wait of every peer (kretry's default is 250ms)")
		serve      = flag.Bool("serve-broker", false, "internal: serve the embedded broker until stdin closes")
		parts      = flag.Int("partitions", partitions, "internal: partitions of the served broker")
	)
	flag.Parse()
	if *serve {
		if err := serveBroker(*parts); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	if *quick {
		*records = 3000
	}
	if *paced <= 0 {
		*paced = *records / 4
	}
	lvl := slog.LevelError
	if *verbose {
		lvl = slog.LevelWarn
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := &config{
		records: *records, paced: *paced, rate: *rate, inproc: *inproc,
		maxInFlight: 64,
		tiers:       []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond},
		fetchWait:   *fetchWait,
		log:         log,
		maxPending:  *maxPending,
		commitIvl:   *commitIvl,
	}
	if err := run(ctx, cfg, split(*peerList), split(*wlList), !*noMem); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func run(ctx context.Context, cfg *config, onlyPeers, onlyWorkloads []string, mem bool) error {
	start := time.Now()
	fmt.Printf("kretry bench: %d backlog + %d paced records per run at %.0f records/s, %d partitions, %d keys, MaxInFlight %d, tiers/backoff %v\n",
		cfg.records, cfg.paced, cfg.rate, partitions, numKeys, cfg.maxInFlight, cfg.tiers)
	fmt.Printf("machine: %d CPUs (GOMAXPROCS %d), %s memory, %s %s/%s; broker: %s\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), memTotal(), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		map[bool]string{true: "in this process", false: "child process"}[cfg.inproc])
	for _, p := range peers {
		if len(onlyPeers) == 0 || slices.Contains(onlyPeers, p.name) {
			fmt.Printf("  %-12s %s\n", p.name, p.desc)
		}
	}
	fmt.Println()
	var results []*result
	for _, w := range workloads {
		if len(onlyWorkloads) > 0 && !slices.Contains(onlyWorkloads, w.name) {
			continue
		}
		p := newPlan(w, cfg.records, cfg.paced)
		for _, pr := range peers {
			if (len(onlyPeers) > 0 && !slices.Contains(onlyPeers, pr.name)) || !runs(w, pr) {
				continue
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fmt.Fprintf(os.Stderr, "%-9s %-12s … ", w.name, pr.name)
			t0 := time.Now()
			r, err := runOne(ctx, cfg, w, p, pr)
			if err != nil {
				fmt.Fprintf(os.Stderr, "error: %v\n", err)
				results = append(results, &result{w: w, p: pr, err: err})
				continue
			}
			fmt.Fprintf(os.Stderr, "%.0f rec/s, p99 %s, join %s (%.1fs) %s\n", r.recPerSec, ms(r.p99), ms(r.joinDelay), time.Since(t0).Seconds(), r.txns)
			results = append(results, r)
		}
	}
	var m *memResult
	if mem && (len(onlyPeers) == 0 || slices.Contains(onlyPeers, "kretry")) {
		keys, perKey := 2000, 5
		if cfg.records < 20000 {
			keys, perKey = 500, 4
		}
		fmt.Fprintf(os.Stderr, "memory: %d blocked keys × %d parked records … ", keys, perKey)
		var err error
		m, err = measureMemory(ctx, cfg.inproc, keys, perKey, cfg.log)
		if err != nil {
			fmt.Fprintf(os.Stderr, "error: %v\n", err)
		} else {
			fmt.Fprintln(os.Stderr, "done")
		}
	}
	report(os.Stdout, cfg, results, m)
	fmt.Printf("\ntotal %.0fs\n", time.Since(start).Seconds())
	return nil
}

// result is one (workload, peer) run.
type result struct {
	w   *workload
	p   *peer
	err error

	recPerSec, healthyPerSec float64
	p50, p99                 time.Duration
	lateP99Paced             time.Duration
	lateP99Drain             time.Duration
	lateN                    int
	cpuPer100k, brokerPer100 float64 // seconds
	drainComplete            bool
	pacedComplete            bool
	dropped                  int64
	dupes                    int64
	latencyN                 int
	joinDelay                time.Duration // peer start → first fetch of the source
	txns                     string        // kretry: transaction summary
}

func runOne(ctx context.Context, cfg *config, w *workload, p *plan, pr *peer) (*result, error) {
	b, err := startBroker(cfg.inproc, partitions)
	if err != nil {
		return nil, err
	}
	defer b.close()
	topic := "bench"
	adm, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...))
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	created, err := kadm.NewClient(adm).CreateTopics(ctx, partitions, 1, nil, topic, topic+".blocking-dlq", topic+".poison")
	if err == nil {
		err = created.Error()
	}
	if err != nil {
		return nil, err
	}
	a := newApp(p, cfg.tiers[0])
	e := &env{addrs: b.addrs, topic: topic, group: "bench-" + pr.name, a: a, maxInFlight: cfg.maxInFlight,
		tiers: cfg.tiers, fetchWait: cfg.fetchWait, log: cfg.log, maxPending: cfg.maxPending, commitIvl: cfg.commitIvl, obs: &txnObserver{}}
	if pr.name == "kretry-http" || pr.name == "bare-post" {
		url, stopApp, err := startApp(a)
		if err != nil {
			return nil, err
		}
		defer stopApp()
		e.appURL = url
	}
	prod, err := newProducer(b.addrs, topic, p, a)
	if err != nil {
		return nil, err
	}
	defer prod.cl.Close()
	if err := prod.backlog(ctx); err != nil {
		return nil, fmt.Errorf("producing the backlog: %w", err)
	}

	if err := b.watch(topic, created[topic].ID); err != nil {
		return nil, err
	}
	cpu := startSampler(b.cpu)
	defer cpu.close()
	drain := a.begin(0, p.backlog)
	peerStart := time.Now()
	stopPeer, err := pr.start(ctx, e)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			stopPeer()
		}
	}()
	r := &result{w: w, p: pr}
	r.drainComplete = drain.wait(120 * time.Second)

	anchor := b.firstFetch()
	paced := a.begin(p.backlog, p.backlog+p.paced)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	perr := make(chan error, 1)
	go func() { perr <- prod.pace(pctx, cfg.rate) }()
	r.pacedComplete = paced.wait(time.Duration(float64(p.paced)/cfg.rate*float64(time.Second)) + 60*time.Second)
	if !r.pacedComplete {
		cancel()
		<-perr
	} else if err := <-perr; err != nil {
		return nil, fmt.Errorf("producing the paced records: %w", err)
	}
	stopPeer()
	stopped = true

	// The drain window opens when the broker first sees a fetch of the
	// source (after the group join and kretry's parking restore) and
	// closes when the last record settles.
	start := anchor
	if start == 0 || (drain.start.Load() != 0 && drain.start.Load() < start) {
		start = drain.start.Load()
	}
	r.joinDelay = time.Duration(start - peerStart.UnixNano())
	if start != 0 {
		if d := drain.lastAll.Load() - start; d > 0 {
			r.recPerSec = float64(drain.doneAll.Load()) / (float64(d) / 1e9)
		}
		if d := drain.lastHealthy.Load() - start; d > 0 {
			r.healthyPerSec = float64(drain.doneHealthy.Load()) / (float64(d) / 1e9)
		}
		if n := drain.doneAll.Load(); n > 0 {
			s0, b0 := cpu.at(start)
			s1, b1 := cpu.at(drain.lastAll.Load())
			r.cpuPer100k = (s1 - s0).Seconds() / float64(n) * 1e5
			r.brokerPer100 = (b1 - b0).Seconds() / float64(n) * 1e5
		}
	}
	lat := paced.latencies
	// Records never acknowledged in the paced phase count with the time
	// they waited so far: a lower bound, marked in the notes.
	for i := paced.from; i < paced.to; i++ {
		if p.healthy(i) && !a.settled[i].Load() {
			if pt := a.produced[i].Load(); pt != 0 {
				lat = append(lat, time.Duration(paced.endWall-pt))
			}
		}
	}
	r.latencyN = len(lat)
	r.p50, r.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	r.lateP99Paced = percentile(paced.lateness, 0.99)
	r.lateP99Drain = percentile(drain.lateness, 0.99)
	r.lateN = len(paced.lateness) + len(drain.lateness)
	r.dropped, r.dupes = a.dropped.Load(), a.dupes.Load()
	r.txns = e.obs.summary()
	return r, nil
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/1e6)
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

// report prints the table, the ratios and the targets.
func report(out io.Writer, cfg *config, rs []*result, m *memResult) {
	find := func(wl, peer string) *result {
		for _, r := range rs {
			if r.w.name == wl && r.p.name == peer && r.err == nil {
				return r
			}
		}
		return nil
	}
	ratio := func(a, b float64) string {
		if a == 0 || b == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	rows := [][]string{{"workload", "peer", "rec/s", "×baseline", "healthy-key rec/s", "×own healthy run",
		"p50", "p99", "p99 ×own healthy", "retry late p99 paced", "retry late p99 drain", "CPU s/100k", "broker CPU s/100k", "notes"}}
	for _, r := range rs {
		if r.err != nil {
			rows = append(rows, []string{r.w.name, r.p.name, "", "", "", "", "", "", "", "", "", "", "", "error: " + r.err.Error()})
			continue
		}
		xb, xo, xp := "–", "–", "–"
		if base := find(r.w.name, r.p.baseline); base != nil {
			xb = ratio(r.recPerSec, base.recPerSec)
		}
		if own := find("healthy", r.p.name); own != nil && r.w.name != "healthy" {
			xo = ratio(r.healthyPerSec, own.recPerSec)
			xp = ratio(float64(r.p99), float64(own.p99))
		}
		late, drain := "–", "–"
		if r.lateN > 0 {
			late, drain = ms(r.lateP99Paced), ms(r.lateP99Drain)
		}
		brk := fmt.Sprintf("%.2f", r.brokerPer100)
		if cfg.inproc {
			brk = "(in CPU)"
		}
		var notes []string
		if !r.drainComplete {
			notes = append(notes, "backlog not drained in 120s")
		}
		if !r.pacedComplete {
			notes = append(notes, "paced phase incomplete: p99 is a lower bound")
		}
		if r.dropped > 0 {
			notes = append(notes, fmt.Sprintf("dropped %d failed records", r.dropped))
		}
		if r.dupes > 0 {
			notes = append(notes, fmt.Sprintf("%d repeated acks", r.dupes))
		}
		rows = append(rows, []string{r.w.name, r.p.name, fmt.Sprintf("%.0f", r.recPerSec), xb, fmt.Sprintf("%.0f", r.healthyPerSec), xo,
			ms(r.p50), ms(r.p99), xp, late, drain, fmt.Sprintf("%.2f", r.cpuPer100k), brk, strings.Join(notes, "; ")})
	}
	markdown(out, rows)

	var kr []string
	for _, r := range rs {
		if r.txns != "" {
			kr = append(kr, fmt.Sprintf("  %-9s %-12s join→first source fetch %s; %s", r.w.name, r.p.name, ms(r.joinDelay), r.txns))
		}
	}
	if len(kr) > 0 {
		fmt.Fprintln(out, "\nkretry transactions (backlog and paced phases):")
		for _, l := range kr {
			fmt.Fprintln(out, l)
		}
	}

	fmt.Fprintln(out, "\nratios:")
	line := func(what string, a, b *result, f func(*result) float64) {
		if a == nil || b == nil {
			return
		}
		fmt.Fprintf(out, "  %-62s %s\n", what, ratio(f(a), f(b)))
	}
	thr := func(r *result) float64 { return r.recPerSec }
	hthr := func(r *result) float64 { return r.healthyPerSec }
	p99 := func(r *result) float64 { return float64(r.p99) }
	line("healthy: kretry in-process / bare (rec/s)", find("healthy", "kretry"), find("healthy", "bare"), thr)
	line("healthy: kretry HTTP / bare consume-and-POST (rec/s)", find("healthy", "kretry-http"), find("healthy", "bare-post"), thr)
	for _, pn := range []string{"blocking", "watermill", "kretry", "kretry-http"} {
		line("failures: "+pn+" healthy-key p99 / own healthy p99", find("failures", pn), find("healthy", pn), p99)
	}
	line("failures: blocking p99 / kretry p99", find("failures", "blocking"), find("failures", "kretry"), p99)
	line("failures: watermill p99 / kretry p99", find("failures", "watermill"), find("failures", "kretry"), p99)
	for _, pn := range []string{"bare", "blocking", "watermill", "kretry", "kretry-http", "bare-post"} {
		a, b := find("slow-key", pn), find("healthy", pn)
		if a != nil && b != nil {
			fmt.Fprintf(out, "  %-62s %s\n", "slow-key: "+pn+" other keys' rec/s / no-slow-key rec/s", ratio(hthr(a), thr(b)))
		}
	}
	line("1%-keys: kretry healthy-key p99 / own healthy p99", find("1%-keys", "kretry"), find("healthy", "kretry"), p99)
	line("1%-keys: kretry healthy-key rec/s / own healthy rec/s", find("1%-keys", "kretry"), find("healthy", "kretry"), func(r *result) float64 {
		if r.w.name == "healthy" {
			return r.recPerSec
		}
		return r.healthyPerSec
	})
	line("1%-keys: kretry rec/s (all records) / own healthy rec/s", find("1%-keys", "kretry"), find("healthy", "kretry"), thr)
	line("1%-keys: blocking p99 / kretry p99", find("1%-keys", "blocking"), find("1%-keys", "kretry"), p99)

	fmt.Fprintln(out, "\ntargets (issue 5; issue 3 for 1%-keys):")
	target := func(what string, a, b *result, x func(a, b *result) float64, ok func(float64) bool, want string) {
		if a == nil || b == nil {
			fmt.Fprintf(out, "  n/a   %s (not run)\n", what)
			return
		}
		v := x(a, b)
		verdict := "MISS"
		if ok(v) {
			verdict = "PASS"
		}
		fmt.Fprintf(out, "  %s  %-66s %.2f× (want %s)\n", verdict, what, v, want)
	}
	over := func(f, g func(*result) float64) func(a, b *result) float64 {
		return func(a, b *result) float64 {
			if g(b) == 0 {
				return 0
			}
			return f(a) / g(b)
		}
	}
	atLeast := func(w float64) func(float64) bool { return func(v float64) bool { return v >= w } }
	atMost := func(w float64) func(float64) bool { return func(v float64) bool { return v > 0 && v <= w } }
	target("healthy: kretry in-process ≥ 0.9× bare consumer (rec/s)", find("healthy", "kretry"), find("healthy", "bare"), over(thr, thr), atLeast(0.9), "≥ 0.9×")
	target("healthy: kretry HTTP ≥ 0.9× bare consume-and-POST (rec/s)", find("healthy", "kretry-http"), find("healthy", "bare-post"), over(thr, thr), atLeast(0.9), "≥ 0.9×")
	target("failures: kretry healthy-key p99 ≤ 1.5× own no-failure p99", find("failures", "kretry"), find("healthy", "kretry"), over(p99, p99), atMost(1.5), "≤ 1.5×")
	target("failures: kretry HTTP healthy-key p99 ≤ 1.5× own no-failure p99", find("failures", "kretry-http"), find("healthy", "kretry-http"), over(p99, p99), atMost(1.5), "≤ 1.5×")
	target("failures: blocking-retry healthy-key p99 ≥ 10× kretry's", find("failures", "blocking"), find("failures", "kretry"), over(p99, p99), atLeast(10), "≥ 10×")
	target("slow key: kretry other keys' rec/s ≥ 0.9× no-slow-key run", find("slow-key", "kretry"), find("healthy", "kretry"), over(hthr, thr), atLeast(0.9), "≥ 0.9×")
	target("slow key: kretry HTTP other keys' rec/s ≥ 0.9× no-slow-key run", find("slow-key", "kretry-http"), find("healthy", "kretry-http"), over(hthr, thr), atLeast(0.9), "≥ 0.9×")
	for _, wl := range []string{"failures", "1%-keys"} {
		for _, pn := range []string{"kretry", "kretry-http"} {
			r := find(wl, pn)
			if r == nil || r.lateN == 0 {
				continue
			}
			for _, c := range []struct {
				phase string
				d     time.Duration
			}{{"paced", r.lateP99Paced}, {"backlog drain", r.lateP99Drain}} {
				verdict := "MISS"
				if c.d <= 250*time.Millisecond {
					verdict = "PASS"
				}
				fmt.Fprintf(out, "  %s  %-66s %s (want ≤ 250ms)\n", verdict, fmt.Sprintf("%s: %s retry lateness p99 ≤ 250ms, %s", wl, pn, c.phase), ms(c.d))
			}
		}
	}
	target("issue 3, 1% of keys failing: kretry healthy-key p99 ≤ 1.5× no-failure", find("1%-keys", "kretry"), find("healthy", "kretry"), over(p99, p99), atMost(1.5), "≤ 1.5×")
	target("issue 3, 1% of keys failing: kretry healthy-key rec/s ≥ 0.9× no-failure", find("1%-keys", "kretry"), find("healthy", "kretry"), over(hthr, thr), atLeast(0.9), "≥ 0.9×")
	target("issue 3, 1% of keys failing: kretry rec/s, all records ≥ 0.9× no-failure", find("1%-keys", "kretry"), find("healthy", "kretry"), over(thr, thr), atLeast(0.9), "≥ 0.9×")

	if m != nil {
		fmt.Fprintf(out, "\nmemory (kretry, ordering key; live heap after GC, broker not counted): %d keys blocked, %d records parked (%d per key; key %d bytes, value %d bytes)\n",
			m.blockedKeys, m.parked, m.perKey, m.keyBytes, m.valueBytes)
		fmt.Fprintf(out, "  per blocked key    %6.0f bytes   (heap %d → %d)\n", m.perBlockedKey, m.heap0, m.heap1)
		fmt.Fprintf(out, "  per parked record  %6.0f bytes   (heap %d → %d)\n", m.perParkedRecord, m.heap1, m.heap2)
	}
}

// markdown prints rows as a Markdown table, padded to line up in a
// terminal too.
func markdown(out io.Writer, rows [][]string) {
	w := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			w[i] = max(w[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range r {
			pad := strings.Repeat(" ", w[i]-utf8.RuneCountInString(c))
			if i < 2 || i == len(r)-1 {
				b.WriteString(" " + c + pad + " |")
			} else {
				b.WriteString(" " + pad + c + " |")
			}
		}
		fmt.Fprintln(out, strings.TrimRight(b.String(), " "))
	}
	line(rows[0])
	sep := make([]string, len(w))
	for i := range w {
		if i < 2 || i == len(w)-1 {
			sep[i] = strings.Repeat("-", w[i])
		} else {
			sep[i] = strings.Repeat("-", w[i]-1) + ":"
		}
	}
	line(sep)
	for _, r := range rows[1:] {
		line(r)
	}
}
