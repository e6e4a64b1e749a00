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
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/flow"
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

type config struct {
	records, paced int
	rate           float64
	inproc         bool
	verbose        bool
	newTopics      bool // kretry peers create their stage topics themselves
	maxInFlight    int
	tiers          []time.Duration
	fetchWait      time.Duration
	log            *slog.Logger
	maxPending     int
	commitIvl      time.Duration
	adjacent       bool // schedule.go
	deep           int  // deep.go: backlog of the deep runs, 0 for none
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

// cli holds the command line's flags (defineFlags).
type cli struct {
	records    *int
	paced      *int
	rate       *float64
	quick      *bool
	brokers    *string
	scale      *bool
	scaleKeys  *int
	scaleParts *int
	scaleRecs  *int
	scaleCases *string
	scaleLimit *time.Duration
	inproc     *bool
	peerList   *string
	wlList     *string
	noMem      *bool
	cpuprofile *string
	verbose    *bool
	maxPending *int
	commitIvl  *time.Duration
	newTopics  *bool
	inFlight   *int
	fetchWait  *time.Duration
	adjacent   *bool
	deep       *int
	serve      *bool
	parts      *int
}

// defineFlags defines the command line's flags.
func defineFlags() *cli {
	return &cli{
		records:    flag.Int("records", 20000, "backlog records per run (throughput and CPU)"),
		paced:      flag.Int("paced", 0, "records produced at -rate per run (latency); default records/4"),
		rate:       flag.Float64("rate", 2000, "records/s of the paced phase"),
		quick:      flag.Bool("quick", false, "3000 backlog records per run (and so 750 paced): about a minute per broker"),
		brokers:    flag.String("broker", "both", "where the tables run: embedded (kfake), kafka (Apache Kafka 4.1.1 via Maven; needs java and mvn), or both (one table each)"),
		scale:      flag.Bool("scale", false, "run the scale scenario instead of the table (scale.go: 1,000 partitions, 100,000 blocked keys)"),
		scaleKeys:  flag.Int("scale-keys", 100000, "-scale: blocked keys"),
		scaleParts: flag.Int("scale-partitions", 1000, "-scale: source partitions of the large case"),
		scaleRecs:  flag.Int("scale-records", 100000, "-scale: healthy records of each case's flow phase"),
		scaleCases: flag.String("scale-cases", "", "-scale: run only these cases, PARTITIONSxKEYS comma-separated (e.g. 1000x0,1000x100000; default all four)"),
		scaleLimit: flag.Duration("scale-limit", 3*time.Minute, "-scale: time limit of each phase (a phase stopped by it reports what it did)"),
		inproc:     flag.Bool("inproc-broker", false, "run the broker in this process (its CPU then counts in the peers' CPU)"),
		peerList:   flag.String("peers", "", "comma-separated peers to run (default all)"),
		wlList:     flag.String("workloads", "", "comma-separated workloads to run (default all)"),
		noMem:      flag.Bool("no-memory", false, "skip the memory micro-measure"),
		cpuprofile: flag.String("cpuprofile", "", "write a CPU profile of the whole command to this file"),
		verbose:    flag.Bool("v", false, "log the peers' warnings (BENCH_LOG=info: kretry's info lines too, such as a transaction aborted by a rebalance)"),
		maxPending: flag.Int("kretry-max-pending", 0, "engine.Options.MaxPending for the kretry peers (0: the default, a partition pauses at 4096 or 32 × MaxInFlight records and past that at its share of 65,536 records or of 64 MiB held)"),
		commitIvl:  flag.Duration("kretry-commit-interval", 0, "engine.Options.CommitInterval for the kretry peers (0: the default, 100ms)"),
		newTopics:  flag.Bool("kretry-new-topics", false, "let the kretry peers create their tier, parking and DLQ topics at start, as on a deployment's first start (default: the bench creates them first)"),
		inFlight:   flag.Int("max-in-flight", flow.DefaultMaxInFlight, "MaxInFlight of the kretry peers and of every loop that bounds its deliveries the same way (default: kretry's, app.max_in_flight)"),
		fetchWait:  flag.Duration("fetch-wait", flow.DefaultFetchMaxWait, "fetch max wait of every peer (kretry's default, kafka.fetch_max_wait)"),
		adjacent:   flag.Bool("adjacent-baselines", false, "run kretry's and kretry-http's failures and slow-key runs at the end of each table between extra healthy runs (3 per peer) and divide their ×own healthy figures by those runs' mean instead of the table's healthy row (needs the healthy workload)"),
		deep:       flag.Int("deep-records", 100000, "backlog of the deep runs: kretry's and kretry-http's slow-key and 1%-keys runs again after the table, between healthy runs on as many records, for the rec/s targets that divide by the own healthy run (deep.go; 0: none)"),
		serve:      flag.Bool("serve-broker", false, "internal: serve the embedded broker until stdin closes"),
		parts:      flag.Int("partitions", partitions, "internal: partitions of the served broker"),
	}
}

// config checks the flags and turns them into the run's config and the
// broker kinds its tables run on.
func (f *cli) config() (*config, []string, error) {
	if *f.quick {
		*f.records = 3000
	}
	kinds, err := siteKinds(*f.brokers)
	if err != nil {
		return nil, nil, err
	}
	if *f.paced <= 0 {
		*f.paced = *f.records / 4
	}
	if *f.inFlight < 1 {
		return nil, nil, fmt.Errorf("-max-in-flight %d: want at least 1", *f.inFlight)
	}
	lvl := slog.LevelError
	if *f.verbose {
		lvl = slog.LevelWarn
		if os.Getenv("BENCH_LOG") == "info" {
			lvl = slog.LevelInfo
		}
	}
	return &config{
		records: *f.records, paced: *f.paced, rate: *f.rate, inproc: *f.inproc, verbose: *f.verbose, newTopics: *f.newTopics,
		maxInFlight: *f.inFlight,
		tiers:       []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond},
		fetchWait:   *f.fetchWait,
		log:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})),
		maxPending:  *f.maxPending,
		commitIvl:   *f.commitIvl,
		adjacent:    *f.adjacent,
		deep:        *f.deep,
	}, kinds, nil
}

// siteKinds reads -broker.
func siteKinds(v string) ([]string, error) {
	switch v {
	case "both":
		return []string{siteEmbedded, siteKafka}, nil
	case siteEmbedded, siteKafka:
		return []string{v}, nil
	}
	return nil, fmt.Errorf("-broker %q: want embedded, kafka or both", v)
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
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

// result is one (workload, peer) run.
type result struct {
	w   *workload
	p   *peer
	err error
	// bracketed and adjacentHealthy are its step's (schedule.go);
	// adjacent are the healthy runs a bracketed run is divided by, and
	// unusable counts those next to it that could not be.
	bracketed, adjacentHealthy bool
	adjacent                   []*result
	unusable                   int
	deep                       bool // deep.go
	backlog                    int

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
	assignedToFirst          time.Duration // kretry: partitions assigned → first delivery; 0 when not seen
	txns                     string        // kretry: transaction summary
	peerRSS                  int64         // JVM peers: peak RSS, bytes
	peerJIT                  time.Duration // JVM peers: JIT compiler CPU over the JVM's life
}

func runOne(ctx context.Context, cfg *config, s *site, w *workload, p *plan, pr *peer) (*result, error) {
	b, err := s.broker(partitions)
	if err != nil {
		return nil, err
	}
	defer b.close()
	topic := b.topic
	sourceID, err := runTopics(ctx, cfg, b.addrs, topic, pr)
	if err != nil {
		return nil, err
	}
	e, stopApp, err := newRunEnv(cfg, b.addrs, topic, p, pr)
	if err != nil {
		return nil, err
	}
	defer stopApp()
	a := e.a
	prod, err := newProducer(b.addrs, topic, p, a)
	if err != nil {
		return nil, err
	}
	defer prod.cl.Close()
	if err := prod.backlog(ctx); err != nil {
		return nil, fmt.Errorf("producing the backlog: %w", err)
	}

	if err := b.watch(topic, sourceID); err != nil {
		return nil, err
	}
	cpu := startSampler(b.cpu, e.peerCPU)
	defer cpu.close()
	drain := a.begin(0, p.backlog)
	peerStart := time.Now()
	stopPeer, err := pr.start(ctx, e)
	if err != nil {
		return nil, err
	}
	stopPeer = sync.OnceFunc(stopPeer)
	defer stopPeer()
	r := &result{w: w, p: pr}
	r.drainComplete = drain.wait(120 * time.Second)

	anchor := b.firstFetch()
	paced := a.begin(p.backlog, p.backlog+p.paced)
	if r.pacedComplete, err = runPaced(ctx, prod, paced, cfg.rate, p.paced); err != nil {
		return nil, err
	}
	stopPeer()

	start := drainStart(anchor, drain)
	r.joinDelay = time.Duration(start - peerStart.UnixNano())
	if start != 0 {
		r.drainFigures(drain, cpu, start, pr.jvm)
	}
	r.envFigures(e, p, drain, paced)
	return r, nil
}

// drainStart is when the drain window opens, in Unix ns: when the broker
// first saw a fetch of the source (anchor: after the group join and
// kretry's parking restore), or the drain's first delivery if earlier. The
// window closes when the last record settles. 0 when neither was seen.
func drainStart(anchor int64, drain *phase) int64 {
	if first := drain.start.Load(); anchor == 0 || (first != 0 && first < anchor) {
		return first
	}
	return anchor
}

// newRunEnv is what a run's peer is given (env): the stand-in app, and its
// HTTP server for the peers that POST (stopped by the returned func).
func newRunEnv(cfg *config, addrs []string, topic string, p *plan, pr *peer) (*env, func(), error) {
	a := newApp(p, cfg.tiers[0])
	e := &env{addrs: addrs, topic: topic, partitions: partitions, group: topic + "-" + pr.name, a: a, maxInFlight: cfg.maxInFlight,
		tiers: cfg.tiers, fetchWait: cfg.fetchWait, log: cfg.log, verbose: cfg.verbose, maxPending: cfg.maxPending, commitIvl: cfg.commitIvl, obs: &txnObserver{}}
	if pr.name != "kretry-http" && pr.name != "bare-post" {
		return e, func() {}, nil
	}
	url, stopApp, err := startApp(a)
	if err != nil {
		return nil, nil, err
	}
	e.appURL = url
	return e, stopApp, nil
}

// envFigures are the run's figures that its app and peer counted: paced
// latency, retry lateness, losses, kretry's transactions and the JVM's.
func (r *result) envFigures(e *env, p *plan, drain, paced *phase) {
	a := e.a
	if at, first := e.assigned.Load(), drain.start.Load(); at != 0 && first != 0 {
		r.assignedToFirst = time.Duration(first - at)
	}
	r.pacedFigures(a, p, paced)
	r.lateN = len(paced.lateness) + len(drain.lateness)
	r.lateP99Drain = percentile(drain.lateness, 0.99)
	r.dropped, r.dupes = a.dropped.Load(), a.dupes.Load()
	r.txns = e.obs.summary()
	r.peerRSS = e.peerRSS.Load()
	r.peerJIT = time.Duration(e.peerJIT.Load())
}

// runTopics creates a run's source topic, the blocking peers' DLQ and
// poison topics and, for a kretry peer, its stage topics unless it is to
// create them itself. It returns the source topic's id.
func runTopics(ctx context.Context, cfg *config, addrs []string, topic string, pr *peer) ([16]byte, error) {
	adm, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return [16]byte{}, err
	}
	defer adm.Close()
	created, err := createTopics(ctx, adm, partitions, topic, topic+".blocking-dlq", topic+".poison")
	if err != nil {
		return [16]byte{}, err
	}
	if strings.HasPrefix(pr.name, "kretry") && !cfg.newTopics {
		// kretry's tier, parking and DLQ topics exist, as after a
		// deployment's first start (see -kretry-new-topics).
		if _, err := createTopics(ctx, adm, partitions, kretryStageTopics(topic, cfg.tiers)...); err != nil {
			return [16]byte{}, err
		}
	}
	return created[topic].ID, nil
}

// runPaced produces n records at rate records/s and waits until the peer
// has settled them, or for a minute past the producing time; it reports
// whether all settled.
func runPaced(ctx context.Context, prod *producer, paced *phase, rate float64, n int) (bool, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	perr := make(chan error, 1)
	go func() { perr <- prod.pace(pctx, rate) }()
	complete := paced.wait(time.Duration(float64(n)/rate*float64(time.Second)) + 60*time.Second)
	if !complete {
		cancel()
		<-perr
	} else if err := <-perr; err != nil {
		return false, fmt.Errorf("producing the paced records: %w", err)
	}
	return complete, nil
}

// drainFigures sets r's rates and CPU over the drain window, from start
// to the last record settled.
func (r *result) drainFigures(drain *phase, cpu *cpuSampler, start int64, jvm bool) {
	if d := drain.lastAll.Load() - start; d > 0 {
		r.recPerSec = float64(drain.doneAll.Load()) / (float64(d) / 1e9)
	}
	if d := drain.lastHealthy.Load() - start; d > 0 {
		r.healthyPerSec = float64(drain.doneHealthy.Load()) / (float64(d) / 1e9)
	}
	if n := drain.doneAll.Load(); n > 0 {
		s0, b0 := cpu.at(start)
		s1, b1 := cpu.at(drain.lastAll.Load())
		if jvm {
			s0, s1 = cpu.peerAt(start), cpu.peerAt(drain.lastAll.Load())
		}
		r.cpuPer100k = (s1 - s0).Seconds() / float64(n) * 1e5
		r.brokerPer100 = (b1 - b0).Seconds() / float64(n) * 1e5
	}
}

// pacedFigures sets r's latency percentiles and paced retry lateness.
// Records never acknowledged in the paced phase count with the time they
// waited so far: a lower bound, marked in the notes.
func (r *result) pacedFigures(a *app, p *plan, paced *phase) {
	lat := paced.latencies
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
