package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
)

// This file is the loop: poll → ingest → dispatch → commit, and the
// shutdown at its end.

// Run consumes until ctx is cancelled or a fatal error occurs. On
// cancellation it stops starting deliveries, lets in-flight ones finish (up
// to ShutdownGrace), commits what finished, leaves the group and closes the
// clients; it then returns nil. A fatal client error is returned.
func (e *Engine) Run(ctx context.Context) error {
	defer e.close()
	hardCancel, stop := e.armShutdown(ctx)
	defer hardCancel()
	defer stop()

	e.log.Info("consuming", "tiers", len(e.plan.Tiers), "dlq", e.plan.DLQ, "ordering", e.opts.Ordering, "partitions", e.topics.Partitions)
	go e.loadProducerID(e.hard, e.sess.Client())
	e.mu.Lock()
	e.lastCommit = time.Now()
	e.unlock()
	for {
		if ctx.Err() != nil {
			return e.endRun()
		}
		fetches := e.poll(ctx)
		if fetches.IsClientClosed() {
			return errors.New("engine: client closed")
		}
		if e.needAbort.Swap(false) {
			// A rebalance dropped our state; the session would abort the
			// next End anyway. End an empty transaction now, which rewinds
			// every partition to its committed offset, and start over.
			e.endEmpty()
			e.sess.AllowRebalance()
			continue
		}
		if err := e.fetchErrors(fetches); err != nil {
			e.sess.AllowRebalance()
			if err = e.survive(ctx, err); err != nil {
				return err
			}
			continue
		}
		if tx := e.turn(fetches.Records()); tx != nil {
			if err := e.commit(tx, e.opts.txnTimeout); err != nil {
				e.sess.AllowRebalance()
				if err = e.survive(ctx, err); err != nil {
					return err
				}
				continue
			}
		}
		e.sess.AllowRebalance()
	}
}

// armShutdown sets e.hard, cancelled ShutdownGrace after ctx (in-flight
// deliveries are abandoned then, uncommitted), and the delivery
// deadlines on it, and wakes the loop when ctx ends. Run defers the two
// functions it returns: cancel e.hard, and stop watching ctx.
func (e *Engine) armShutdown(ctx context.Context) (hardCancel func(), stop func() bool) {
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	e.hard = hard
	var hung func(*cohort)
	if !delivery.BoundByContext(e.opts.Deliverer) {
		hung = e.abandonHung
	}
	e.deadlines = newDeadlines(hard, e.opts.DeliveryTimeout, hung)
	stop = context.AfterFunc(ctx, func() {
		t := time.AfterFunc(e.opts.ShutdownGrace, hardCancel)
		context.AfterFunc(hard, func() { t.Stop() })
		e.wake()
	})
	return hardCancel, stop
}

// endRun ends Run once its context is done: the final transaction, and
// whether the group is left (not when a newer instance fenced this one).
func (e *Engine) endRun() error {
	err := e.shutdown()
	e.leave = !errors.Is(err, ErrFenced)
	if errors.Is(err, errSessionReset) {
		// The final transaction did not commit: its records are
		// delivered again by the partitions' next owner.
		e.log.Warn("the final transaction could not commit; its records will be delivered again", "err", err)
		return nil
	}
	return err
}

// turn is the loop's turn on the core: it ingests recs, begins and runs
// the deliveries that may start, and returns the transaction due now (nil
// when none is).
func (e *Engine) turn(recs []*kgo.Record) (tx *txn) {
	e.mu.Lock()
	defer e.unlock()
	e.ingest(recs)
	e.launch(e.dispatch(time.Now()), false)
	if e.txnDue(time.Now()) {
		tx = e.prepare()
	}
	return tx
}

// survive rebuilds the session after an errSessionReset and returns nil
// when that worked; any other error is returned as it is.
func (e *Engine) survive(ctx context.Context, err error) error {
	if errors.Is(err, errSessionReset) {
		return e.resetSession(ctx, err)
	}
	return err
}

// poll waits for records until the next commit or due time (pollWait), or
// until a delivery result wakes it.
func (e *Engine) poll(ctx context.Context) kgo.Fetches {
	e.applyPauses()
	e.mu.Lock()
	wait := e.pollWait(time.Now())
	e.unlock()
	pctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	e.wakeMu.Lock()
	if e.woken {
		cancel()
	}
	e.woken = false
	e.pollCancel = cancel
	e.wakeMu.Unlock()
	f := e.sess.PollRecords(pctx, 4*e.opts.MaxInFlight)
	e.wakeMu.Lock()
	e.pollCancel = nil
	e.wakeMu.Unlock()
	return f
}

// loadProducerID loads the transactional producer's ID and epoch while the
// group join is under way, instead of in the first transaction after the
// assignment (an InitProducerID: ~40ms on Kafka, issue 10's first delivery
// after the join). It also fences at once a predecessor's transaction left
// open under our transactional id, so the assignment's OffsetFetch
// (fetched.go) is not held by it. An error here is left to the first
// transaction, which loads the ID again and reports it.
//
// cl is the session's client when Run started: a session reset replaces
// e.sess, and the old client's load then ends with its Close.
func (e *Engine) loadProducerID(ctx context.Context, cl *kgo.Client) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, _, err := cl.ProducerID(ctx); err != nil && ctx.Err() == nil {
		e.log.Debug("loading the producer id before the first transaction", "err", err)
	}
}

// wake makes the current (or next) poll return at once.
func (e *Engine) wake() {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	if e.pollCancel != nil {
		e.pollCancel()
	} else {
		e.woken = true
	}
}

// endEmpty ends an empty transaction, resetting the session after a
// rebalance.
func (e *Engine) endEmpty() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.sess.End(ctx, kgo.TryAbort); err != nil {
		e.log.Warn("resetting the transaction session after a rebalance", "err", err)
	}
}

// shutdown stops dispatching, waits for in-flight deliveries (bounded by
// ShutdownGrace through e.hard), and commits what finished.
func (e *Engine) shutdown() error {
	e.mu.Lock()
	e.stopping = true
	e.unlock()
	e.waitDeliveries(e.opts.ShutdownGrace + time.Second)
	// An immediately cancelled poll holds off rebalances until
	// AllowRebalance, so the final commit is not cut by one.
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.sess.PollRecords(cctx, 1)
	defer e.sess.AllowRebalance()
	if e.needAbort.Swap(false) {
		return nil // state was dropped by a rebalance: nothing to commit
	}
	e.mu.Lock()
	tx := e.prepare()
	e.unlock()
	if tx != nil {
		return e.commit(tx, shutdownCommitTimeout)
	}
	return nil
}

// Close releases an engine that New built and that will not be Run (Run
// closes its engine itself; do not call both): its clients close and its
// static member, which may have joined the group already, leaves it.
func (e *Engine) Close() {
	e.leave = true
	e.close()
}

func (e *Engine) close() {
	// Close leaves the group (a dynamic member); no transaction is open here.
	// It waits for a JoinGroup under way to finish, so the member id is
	// read after it: read before, it is "" for an engine stopped while
	// joining, whose static member would then stay in the group, hold its
	// partitions for the session timeout and stall the next rebalance.
	e.sess.Close()
	memberID, _ := e.sess.Client().GroupMetadata()
	if e.leave {
		e.leaveStatic(memberID)
	}
	e.adm.Close()
	e.log.Info("stopped")
}

// fetchErrors logs the fetch errors of a poll, once each, and returns the
// fatal ones: our producer fenced (a *FencedError), or the brokers refusing
// our credentials for too long (ErrAuthFailed; see authFailing).
func (e *Engine) fetchErrors(fetches kgo.Fetches) error {
	var fenced, authErr error
	fetches.EachError(func(t string, p int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if isFenced(err) {
			fenced = err
			return
		}
		if credentialsRefused(err) {
			authErr = err
		}
		e.warnOnce("fetch:"+t+":"+err.Error(), "fetch error", "fetch_topic", t, "partition", p, "err", err)
	})
	if fenced != nil {
		if errors.Is(fenced, kerr.FencedInstanceID) && e.pardonTakeover(fenced, time.Now()) {
			return fmt.Errorf("%w: %w: %w", errSessionReset, errPardoned, fenced)
		}
		return e.fenced(fenced)
	}
	return e.authFailing(authErr, time.Now())
}
