package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

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
