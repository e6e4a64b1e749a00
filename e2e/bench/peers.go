package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/blocking"
	"github.com/kretry/kretry/pkg/delivery"
)

// env is what a peer gets for one run.
type env struct {
	addrs       []string
	topic       string
	partitions  int
	group       string
	a           *app
	appURL      string // the application over HTTP (peers e and f)
	maxInFlight int
	tiers       []time.Duration // kretry tiers = blocking backoffs
	fetchWait   time.Duration
	log         *slog.Logger
	verbose     bool
	maxPending  int           // kretry only; 0: default
	commitIvl   time.Duration // kretry only; 0: default
	obs         *txnObserver  // kretry only
	assigned    atomic.Int64  // kretry only: Unix ns of the engine's first assignment (assignWatch)
	peerPID     atomic.Int64  // JVM peers: the JVM's pid, for its CPU
	peerRSS     atomic.Int64  // JVM peers: peak RSS in bytes, read at stop
	peerJIT     atomic.Int64  // JVM peers: JIT compiler threads' CPU (ns) over the JVM's life, read at stop
}

// peerCPU is the CPU time of the peer's JVM, 0 for the in-process peers.
func (e *env) peerCPU() time.Duration {
	if pid := e.peerPID.Load(); pid != 0 {
		return procCPU(int(pid))
	}
	return 0
}

// peer is one consumer under test. start returns once it consumes (or is
// joining); stop stops it.
type peer struct {
	name string
	desc string
	// baseline names the peer whose throughput this one is compared with.
	baseline string
	start    func(ctx context.Context, e *env) (stop func(), err error)
	// jvm marks a peer run as a JVM subprocess: its CPU is the JVM's.
	jvm bool
}

var (
	errPermanent = errors.New("permanent failure")
	errTransient = errors.New("transient failure")
)

func (o outcome) err() error {
	switch o {
	case failPermanent:
		return errPermanent
	case failTransient:
		return errTransient
	}
	return nil
}

// runLoop runs f until ctx ends and returns a stop func that cancels it and
// waits.
func runLoop(ctx context.Context, f func(ctx context.Context)) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	return func() { cancel(); <-done }
}

// (a) The bare consumer: one loop polls and calls the handler for each
// record in turn; the client autocommits polled offsets (franz-go's default,
// every 5s and on leave). A failed record is dropped: the upper bound does
// no retry work.
func startBare(ctx context.Context, e *env) (func(), error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(e.topic), kgo.FetchMaxWait(e.fetchWait))
	if err != nil {
		return nil, err
	}
	stop := runLoop(ctx, func(ctx context.Context) {
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				if e.a.handle(ctx, r.Value) != ack {
					e.a.drop(r.Value)
				}
			})
		}
	})
	return func() { stop(); cl.Close() }, nil
}

// (b) The blocking-retry consumer, as Dapr's Kafka component and Karafka
// work (package internal/blocking, which `kretry gameday` runs too): one
// goroutine per partition handles its records one at a time; a transient
// failure is retried in place after a backoff of the kretry tier delays
// (100ms, 200ms, 400ms), blocking the partition meanwhile; a permanent
// failure, or a fourth failure, is written to the DLQ (synchronously) and
// the partition moves on. Offsets are marked after each record and
// autocommitted.
func startBlocking(ctx context.Context, e *env) (func(), error) {
	return blocking.Start(ctx, blocking.Config{Brokers: e.addrs, Topic: e.topic, Group: e.group,
		Backoffs: e.tiers, FetchMaxWait: e.fetchWait},
		func(ctx context.Context, r *kgo.Record) error {
			switch e.a.handle(ctx, r.Value) {
			case failPermanent:
				return delivery.Permanent(errPermanent)
			case failTransient:
				return delivery.Transient(errTransient)
			}
			return nil
		})
}

// (f) The bare consume-and-POST loop: poll up to 4 × MaxInFlight records,
// POST them with at most MaxInFlight in flight (the same delivery.HTTP
// deliverer and transport as kretry, so only the engine differs), wait for
// the batch, mark it and let the client autocommit. No ordering, no retry:
// a failed record is dropped.
func startBarePost(ctx context.Context, e *env) (func(), error) {
	h, err := delivery.NewHTTP(delivery.HTTPConfig{URL: e.appURL, MaxInFlight: e.maxInFlight})
	if err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(e.topic), kgo.FetchMaxWait(e.fetchWait), kgo.AutoCommitMarks())
	if err != nil {
		return nil, err
	}
	sem := make(chan struct{}, e.maxInFlight)
	stop := runLoop(ctx, func(ctx context.Context) {
		for ctx.Err() == nil {
			fs := cl.PollRecords(ctx, 4*e.maxInFlight)
			var wg sync.WaitGroup
			fs.EachRecord(func(r *kgo.Record) {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					m := &delivery.Message{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
						Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Headers: r.Headers, Attempt: 1}
					if h.Deliver(ctx, m) != nil {
						e.a.drop(r.Value)
					}
				})
			})
			wg.Wait()
			cl.MarkCommitRecords(fs.Records()...)
		}
	})
	return func() { stop(); cl.Close(); h.Close() }, nil
}

// startApp serves the application over HTTP on a free loopback port:
// 204 for an acknowledgement, 422 (permanent) or 503 (transient) for a
// failure.
func startApp(a *app) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			switch a.handle(r.Context(), body) {
			case ack:
				w.WriteHeader(http.StatusNoContent)
			case failPermanent:
				w.WriteHeader(http.StatusUnprocessableEntity)
			default:
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}),
	}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/kafka", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
