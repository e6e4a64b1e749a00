package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/kretry/kretry/pkg/flow"
)

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
