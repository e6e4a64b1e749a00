package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// txnTrace records, as the broker sees them, the transactional requests of
// one transactional id: every TxnOffsetCommit (offsets per partition) and
// every EndTxn (commit or abort) and InitProducerID, in order.
type txnTrace struct {
	mu    sync.Mutex
	lines []string
}

func (tr *txnTrace) add(format string, args ...any) {
	tr.mu.Lock()
	tr.lines = append(tr.lines, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	tr.mu.Unlock()
}

func (tr *txnTrace) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return strings.Join(tr.lines, "\n")
}

// newTracedEnv is newEnv on a kfake cluster of our own, whose transactional
// requests are traced and whose control hook crash, when set, may cut an
// engine's network in the middle of a transaction's end.
func newTracedEnv(t *testing.T, partitions int32, tiers ...time.Duration) (*env, *kfake.Cluster, *txnTrace) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(partitions)), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tr := &txnTrace{}
	c.Control(func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		switch req := kreq.(type) {
		case *kmsg.InitProducerIDRequest:
			if req.TransactionalID != nil {
				tr.add("InitProducerID %s pid=%d epoch=%d", *req.TransactionalID, req.ProducerID, req.ProducerEpoch)
			}
		case *kmsg.TxnOffsetCommitRequest:
			var b strings.Builder
			for _, t := range req.Topics {
				for _, p := range t.Partitions {
					fmt.Fprintf(&b, " %s/%d=%d", t.Topic, p.Partition, p.Offset)
				}
			}
			tr.add("TxnOffsetCommit v%d epoch=%d gen=%d%s", req.Version, req.ProducerEpoch, req.Generation, b.String())
		case *kmsg.EndTxnRequest:
			tr.add("EndTxn v%d epoch=%d commit=%v", req.Version, req.ProducerEpoch, req.Commit)
		}
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	src := "orders"
	if _, err := adm.CreateTopic(context.Background(), partitions, 1, nil, src); err != nil {
		t.Fatal(err)
	}
	plan := retrytopics.Plan{Source: src, DLQ: retrytopics.DLQTopic(src)}
	for _, d := range tiers {
		plan.Tiers = append(plan.Tiers, retrytopics.Tier{Topic: retrytopics.TierTopic(src, d), Delay: d})
	}
	return &env{t: t, addrs: c.ListenAddrs(), plan: plan, adm: adm, app: newRecorder()}, c, tr
}

// TestStaleCopyAfterCrash crashes engines sharing one transactional id at
// random moments — while idle, inside a transaction after its moves are
// flushed, just after the broker took its offsets (TxnOffsetCommit), and
// just as it ends it (EndTxn) — several times in a row, each time starting
// a successor at once, and then checks where every record landed: one copy
// per hop in each tier, one per record in the DLQ, conservation, and
// committed offsets past every record, and no parking block/release op
// committed twice (a stale tier copy acknowledged again). It runs one round
// of the four crash modes, or N with KRETRY_TEST_STALE_ROUNDS=N (each round is
// about 20s under -race on 2 cores).
//
// Its timer mode used to wedge: an engine killed inside its JoinGroup kept a
// partition in the embedded broker forever, so the final engine never got
// it. That was kfake's defect (DESIGN.md invariant 11), fixed in
// internal/thirdparty/kfake and pinned by internal/broker's
// TestMemberKilledInJoinExpires.
func TestStaleCopyAfterCrash(t *testing.T) {
	if brokerKind != kafkatest.Embedded {
		t.Skip("kills engines at exact points of the transaction protocol by intercepting requests inside kfake; Kafka has no such hook (the fault suite crashes instances at random moments on Kafka)")
	}
	rounds := 1
	if v := os.Getenv("KRETRY_TEST_STALE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("KRETRY_TEST_STALE_ROUNDS=%q: want a number of rounds, at least 1", v)
		}
		rounds = n
	}
	for i := range rounds {
		for _, mode := range []string{"timer", "beforeEnd", "afterTxnOffsetCommit", "atEndTxn"} {
			t.Run(fmt.Sprintf("%s/%d", mode, i), func(t *testing.T) {
				t.Parallel()
				staleRound(t, mode, int64(i))
			})
		}
	}
}

func staleRound(t *testing.T, mode string, seed int64) {
	const parts = 2
	e, c, tr := newTracedEnv(t, parts, 100*time.Millisecond, 200*time.Millisecond)
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(len(mode))))
	w := newWorkload(150, 9, parts, 30, 5, 5)
	e.app.setAnswer(w.answer)
	half := len(w.recs) / 2
	e.produce(w.recs[:half]...)

	var killCur atomic.Pointer[func()]
	var armed atomic.Bool
	// A member killed inside its JoinGroup stays pending in the broker
	// until its rebalance timeout (60s by default): keep it short, as the
	// session timeout is.
	group := append([]kgo.Opt{kgo.RebalanceTimeout(2 * time.Second)}, fastGroup...)
	txid := "test-" + t.Name()
	// Mid-End crash points: the broker handles the request, and the
	// engine's network is cut a moment later, before it hears back.
	if mode == "afterTxnOffsetCommit" || mode == "atEndTxn" {
		key := int16(kmsg.TxnOffsetCommit)
		if mode == "atEndTxn" {
			key = int16(kmsg.EndTxn)
		}
		c.ControlKey(key, func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if armed.Load() && rng.IntN(3) == 0 {
				armed.Store(false)
				if k := killCur.Load(); k != nil {
					go func() {
						time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
						(*k)()
					}()
				}
			}
			return nil, nil, false
		})
	}
	const crashes = 4
	for n := range crashes {
		o := e.keyedOptions(e.app, flow.OnDeadLetterRelease)
		o.TransactionalID = txid
		o.GroupOpts = group
		var kill func()
		crashed := make(chan struct{})
		var once sync.Once
		doKill := func() {
			once.Do(func() {
				tr.add("--- crash %d (%s)", n, mode)
				kill()
				close(crashed)
			})
		}
		if mode == "beforeEnd" {
			var txns atomic.Int64
			at := int64(2 + rng.IntN(8))
			o.beforeEnd = func() {
				if txns.Add(1) == at {
					doKill()
				}
			}
		}
		kill = e.startCrashable(o)
		killCur.Store(&doKill)
		if n == 1 {
			e.produce(w.recs[half:]...)
		}
		switch mode {
		case "timer":
			time.AfterFunc(time.Duration(200+rng.IntN(1200))*time.Millisecond, doKill)
		case "afterTxnOffsetCommit", "atEndTxn":
			time.AfterFunc(time.Duration(200+rng.IntN(600))*time.Millisecond, func() { armed.Store(true) })
			time.AfterFunc(5*time.Second, doKill) // in case no transaction comes
		case "beforeEnd":
			// In case the at-th transaction never comes: by the last
			// crashes the workload may be nearly drained, and an idle
			// engine ends no transaction (CI run at 933a869: "crash 3
			// did not happen").
			time.AfterFunc(5*time.Second, doKill)
		}
		select {
		case <-crashed:
		case <-time.After(15 * time.Second):
			t.Fatalf("crash %d did not happen", n)
		}
	}
	o := e.keyedOptions(e.app, flow.OnDeadLetterRelease)
	o.TransactionalID = txid
	o.GroupOpts = group
	_, stop := e.start(o)
	deadline := time.Now().Add(30 * time.Second)
	behind := func() int {
		n := 0
		for _, topic := range append([]string{e.plan.Source}, tierTopics(e)...) {
			n += len(e.recordsAfterCommit(o.Group, topic))
		}
		return n
	}
	for !(w.settled(e) && behind() == 0) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !w.settled(e) {
		t.Errorf("not every record acknowledged or dead-lettered after 30s")
		dlq := e.dlqIDs()
		e.app.mu.Lock()
		for _, r := range w.recs {
			rid := id(e.plan.Source, r.Partition, r.Offset)
			if e.app.acked[rid] == 0 && dlq[rid] == 0 {
				var seen []string
				for _, c := range e.app.calls {
					if c.msg.ID == rid {
						seen = append(seen, fmt.Sprintf("attempt %d ok=%v at %s", c.msg.Attempt, c.ok, c.at.Format("15:04:05.000")))
					}
				}
				t.Logf("unsettled %s key=%s value=%s: %v", rid, r.Key, r.Value, seen)
			}
		}
		e.app.mu.Unlock()
	}
	stop()
	dups := checkPlaces(t, e, o.Group)
	w.verify(t, e)
	if t.Failed() {
		t.Logf("dups=%d; transaction trace:\n%s", dups, tr)
		dumpTopics(t, e, o)
	}
}

// dumpTopics logs every committed record of the tiers and the group's
// committed offsets.
func dumpTopics(t *testing.T, e *env, o Options) {
	offs, _ := e.adm.FetchOffsets(context.Background(), o.Group)
	var lines []string
	offs.Each(func(r kadm.OffsetResponse) {
		lines = append(lines, fmt.Sprintf("%s/%d=%d", r.Topic, r.Partition, r.At))
	})
	sort.Strings(lines)
	t.Logf("committed: %s", strings.Join(lines, " "))
	for _, topic := range append(tierTopics(e), o.ParkingTopic) {
		var b strings.Builder
		for _, r := range readTopic(t, e, topic) {
			op, ref, _, _ := opOf(r)
			fmt.Fprintf(&b, "\n  %d/%d key=%s %s %s %s", r.Partition, r.Offset, r.Key, hopOf(r), op, ref)
		}
		t.Logf("%s:%s", topic, b.String())
	}
}

// startCrashable runs an engine whose process can be "killed": kill cuts
// its network and silences its log. Unlike startKillable, the severed
// engine's moves are meant to fail within a second instead of retrying for
// the 60s of commit's context; at cleanup, an engine still not stopped has
// its client closed (see there).
func (e *env) startCrashable(o Options) (kill func()) {
	e.t.Helper()
	d := &severableDialer{}
	o.ClientOpts = append(o.ClientOpts[:len(o.ClientOpts):len(o.ClientOpts)], kgo.Dialer(d.dial), kgo.RetryTimeout(2*time.Second),
		// A severed engine's moves fail within a second, so that its Flush
		// returns (commit closes its error channel once Flush returns, and
		// a promise failing after that panics the test binary).
		kgo.RecordDeliveryTimeout(time.Second))
	out := &switchWriter{w: e.t.Output()}
	o.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: testLogLevel}))
	eng, err := New(context.Background(), o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { eng.Run(ctx); close(done) }()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			d.sever()
			out.mu.Lock()
			out.off = true
			out.mu.Unlock()
			cancel()
		})
	}
	e.t.Cleanup(func() {
		kill()
		select {
		case <-done:
			return
		case <-time.After(2 * time.Second):
		}
		// Still in its shutdown commit: records buffered when the
		// network went can outlive RecordDeliveryTimeout (kgo checks
		// it only before writing a produce request or after a
		// response; 3 to 36 records were seen still buffered), and
		// Flush then waits out commit's 60s context. A killed
		// process's client dies with it; close this one.
		eng.sess.CloseAllowingRebalance()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			e.t.Error("a crashed engine's Run did not return within 10s of its client's Close")
		}
	})
	return kill
}
