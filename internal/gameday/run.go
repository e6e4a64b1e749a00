package gameday

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/lag"
)

// Options configure a game day.
type Options struct {
	// Plan is the schedule and the limits (Quick or Full).
	Plan Plan
	// Brokers are real brokers to run against; nil starts an in-memory
	// embedded broker.
	Brokers []string
	// Peers to run, in order: "kretry", "blocking" (default both).
	Peers []string
	// Progress gets one line per phase; nil shows none.
	Progress io.Writer
	// Logger for kretry and the broker; nil discards their logs below warn.
	Logger *slog.Logger
}

// PeerNames are the peers a game day can run.
var PeerNames = []string{"kretry", "blocking"}

// env is what one peer's run gets.
type env struct {
	plan   *Plan
	addrs  []string
	topic  string
	app    *app
	adm    *kadm.Client
	log    *slog.Logger
	prefix string // of the topics and groups: distinct per run, for real brokers
}

// peer starts one consumer under test. It returns the lag monitor's
// config for its group and DLQ, the DLQ topic, kretry's /metrics URL ("" for
// none) and a stop func that returns the peer's error.
type peer interface {
	start(ctx context.Context, e *env) (started, error)
}

type started struct {
	lag     lag.Config
	dlq     string
	metrics string
	// setup says how the peer was configured, for the report.
	setup string
	stop  func() error
}

// Run runs the game day for each peer and returns the report. The error is
// for a game day that could not run (a broker that does not answer, a port
// in use); failed checks are in the report (Report.OK false).
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Plan.Name == "" {
		o.Plan = Quick()
	}
	if len(o.Peers) == 0 {
		o.Peers = PeerNames
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	rep := &Report{Plan: planJSON(&o.Plan), Started: time.Now()}
	addrs := o.Brokers
	rep.Broker = "embedded"
	if len(addrs) == 0 {
		b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: o.Plan.Partitions, Logger: log})
		if err != nil {
			return nil, err
		}
		defer b.Close()
		addrs = b.Addrs()
	} else {
		rep.Broker = strings.Join(addrs, ",")
	}
	for _, name := range o.Peers {
		var p peer
		switch name {
		case "kretry":
			p = kretryPeer{}
		case "blocking":
			p = blockingPeer{}
		default:
			return nil, fmt.Errorf("gameday: unknown peer %q: want one of %s", name, strings.Join(PeerNames, ", "))
		}
		pr, err := runPeer(ctx, &o, addrs, name, p, log)
		if err != nil {
			return nil, fmt.Errorf("gameday: peer %s: %w", name, err)
		}
		rep.Peers = append(rep.Peers, pr)
	}
	rep.finish()
	return rep, nil
}

func runPeer(ctx context.Context, o *Options, addrs []string, name string, p peer, log *slog.Logger) (*PeerReport, error) {
	plan := &o.Plan
	e := &env{plan: plan, addrs: addrs, log: log, prefix: fmt.Sprintf("gameday-%s-%d", name, time.Now().UnixMilli())}
	e.topic = e.prefix + ".orders"
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := e.open(ctx, cl); err != nil {
		return nil, err
	}
	defer e.app.close()

	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := p.start(pctx, e)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped { // an error: stop the peer before the app and the client
			cancel()
			_ = st.stop()
		}
	}()
	mon, err := lag.New(cl, st.lag, lag.WithLogger(log))
	if err != nil {
		return nil, err
	}
	dcl, err := newDLQClient(addrs, st.dlq)
	if err != nil {
		return nil, err
	}
	defer dcl.Close()
	dlq := &dlqReader{}
	smp := &sampler{mon: mon, metrics: st.metrics, dlq: dlq}
	ld := newLoad(cl, e.topic, plan.Keys)
	var bg sync.WaitGroup
	bg.Go(func() { smp.run(pctx, 100*time.Millisecond) })
	bg.Go(func() { dlq.run(pctx, dcl) })
	bg.Go(func() { ld.run(pctx) })
	ph := &phases{ctx: pctx, e: e, load: ld, smp: smp, dlq: dlq, progress: o.Progress, peer: name}
	ph.run()
	if err := ld.wait(); err != nil {
		return nil, err
	}
	cancel()
	bg.Wait()
	stopped = true
	if err := st.stop(); err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	pr := analyze(name, plan, ph.spans, smp.all(), e.app.arrivals(), dlq.all(), ld.records(), ph.poison, ph.burst)
	pr.Setup = st.setup
	return pr, nil
}

// open creates e's source topic and starts its app; the caller closes
// e.app.
func (e *env) open(ctx context.Context, cl *kgo.Client) error {
	e.adm = kadm.NewClient(cl)
	if err := createTopics(ctx, e.adm, e.plan.Partitions, e.topic); err != nil {
		return err
	}
	a, err := startApp(e.plan.AppWorkers, e.plan.ServiceTime)
	if err != nil {
		return err
	}
	e.app = a
	return nil
}

// newDLQClient reads the peer's DLQ topic from its start, committed
// records only.
func newDLQClient(addrs []string, topic string) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
}

func createTopics(ctx context.Context, adm *kadm.Client, partitions int32, topics ...string) error {
	resp, err := adm.CreateTopics(ctx, partitions, -1, nil, topics...)
	if err != nil {
		return err
	}
	if err := resp.Error(); err != nil {
		return err
	}
	return waitTopics(ctx, adm, topics...)
}

// waitTopics waits until the brokers' metadata lists every partition of
// topics with a leader (a real cluster takes a moment after CreateTopics).
func waitTopics(ctx context.Context, adm *kadm.Client, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		md, err := adm.Metadata(ctx, topics...)
		if err == nil && md.Topics.Error() == nil {
			ready := true
			for _, t := range md.Topics {
				for _, p := range t.Partitions {
					ready = ready && p.Leader >= 0 && p.Err == nil
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %v not ready: %w", topics, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeAddr returns a free loopback address for kretry's metrics.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
