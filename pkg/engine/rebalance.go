package engine

import (
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file handles assignment changes: the rebalance callbacks, and the
// core's side of an assignment (assign). The reset that drops all state is
// the core's (core.go).

// assigned creates the shards of newly assigned partitions. With parking,
// each new shard starts by replaying its parking partition (see
// parking.go); its source and tier partitions stay paused until then.
func (e *Engine) assigned(m map[string][]int32) {
	defer e.joinedOnce.Do(func() { close(e.joined) })
	e.mu.Lock()
	defer e.unlock()
	e.log.Info("partitions assigned", "partitions", partitionList(m))
	n := e.assign(m)
	time.AfterFunc(offsetsFetchWait, func() {
		e.mu.Lock()
		defer e.unlock()
		e.offsetsWaitOver(n)
	})
}

// assign creates the shards of newly assigned partitions and starts the
// barrier's wait for the assignment's OffsetFetch (fetched.go). It returns
// the assignment's number, for offsetsWaitOver.
func (c *core) assign(m map[string][]int32) int {
	c.fetched, c.fetchWaited = nil, false
	c.commits = groupCommits{} // the OffsetFetch answers them (offsetsFetched)
	c.assignments++
	for _, p := range m[c.plan.Source] {
		c.shardFor(p)
	}
	if c.parking() && len(m[c.plan.Source]) > 0 {
		c.barrierDue = true
		c.wake()
	}
	return c.assignments
}

// revoked drops all state: the range assignor is eager, so a rebalance
// revokes every partition. In-flight deliveries are waited for, so that a
// record's old delivery cannot land after its new owner's next one.
func (e *Engine) revoked(m map[string][]int32, lost bool) {
	if countPartitions(m) == 0 {
		return
	}
	e.stats.Revoked.Add(int64(countPartitions(m)))
	if lost {
		e.log.Warn("partitions lost: the group membership ended without a rebalance (the session expired, the brokers are unreachable, or this member was fenced); they are assigned again once the group answers", "partitions", partitionList(m))
	} else {
		e.log.Info("partitions revoked", "partitions", partitionList(m))
	}
	e.mu.Lock()
	e.reset()
	e.commits = groupCommits{} // no longer ours: never rewritten (keepCommits)
	stopping := e.stopping
	e.unlock()
	e.needAbort.Store(true)
	if !stopping { // at shutdown they were waited for already
		e.waitDeliveries(e.opts.DeliveryTimeout + time.Second)
	}
}

// waitDeliveries waits for in-flight deliveries to end, at most d: a
// handler that ignores its context must not hang a rebalance or a shutdown.
// Past d the delivery is abandoned (its result is discarded) and a warning
// says that its record may reach the app again while it is still running.
func (e *Engine) waitDeliveries(d time.Duration) {
	done := make(chan struct{})
	go func() {
		e.deliveries.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		e.log.Warn("a delivery did not end within its timeout (the handler ignores its context?); abandoning it", "waited", d)
	}
}

// partitionList logs a callback's partitions as "orders[0 1 2]
// orders.retry.1m[0]" (topics and partitions sorted; "none" when empty),
// not as Go's map[orders:[0 1 2] …], in text and JSON logs alike.
type partitionList map[string][]int32

func (m partitionList) LogValue() slog.Value {
	var b strings.Builder
	for _, t := range slices.Sorted(maps.Keys(m)) {
		if len(m[t]) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t)
		b.WriteByte('[')
		for i, p := range slices.Sorted(slices.Values(m[t])) {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.Itoa(int(p)))
		}
		b.WriteByte(']')
	}
	if b.Len() == 0 {
		return slog.StringValue("none")
	}
	return slog.StringValue(b.String())
}
