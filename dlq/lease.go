package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/topicread"
)

// leaseKey is the key of lease records on the marks topic.
const leaseKey = "lease"

// Lease is the value of a lease record, JSON: who runs an operation on the
// DLQ. See the package doc.
type Lease struct {
	Holder string    `json:"holder"` // the operation's id
	Action string    `json:"action"` // redrive | discard
	By     string    `json:"by"`
	Host   string    `json:"host"`
	PID    int       `json:"pid"`
	State  string    `json:"state"` // held | released
	At     time.Time `json:"at"`    // the holder's clock at this write
}

const (
	leaseHeld     = "held"
	leaseReleased = "released"
)

// ErrBusy reports a DLQ on which another redrive or discard runs; the
// error is a *BusyError.
var ErrBusy = errors.New("another redrive or discard of this DLQ is running")

// BusyError names the operation that holds the DLQ.
type BusyError struct {
	DLQ   string
	Lease Lease
	TTL   time.Duration
}

func (e *BusyError) Error() string {
	l := e.Lease
	return fmt.Sprintf("%s: %v: %s %s by %s (host %s, pid %d) holds it, last renewed %s; wait for it to end or stop it (Ctrl-C or the admin API's cancel); "+
		"a holder that died frees the DLQ %s after its last renewal",
		e.DLQ, ErrBusy, l.Action, l.Holder, l.By, l.Host, l.PID, l.At.UTC().Format(time.RFC3339), e.TTL)
}

func (e *BusyError) Unwrap() error { return ErrBusy }

// heldLease is a lease this process holds; release ends it.
type heldLease struct {
	pr   *kgo.Client
	self Lease
	stop chan struct{}
	done sync.WaitGroup
}

// acquire takes the lease of the DLQ for self, or returns a *BusyError.
func (c *Client) acquire(ctx context.Context, self Lease) (*heldLease, error) {
	topic := MarksTopic(c.t.DLQ)
	rd, holders, err := c.heldLeases(ctx, topic)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var dead []Lease
	if len(holders) > 0 {
		if dead, err = c.watchHolders(ctx, rd, holders); err != nil {
			return nil, err
		}
	}
	pr, err := kgo.NewClient(append(slices.Clone(c.opts), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return nil, err
	}
	h := &heldLease{pr: pr, self: self, stop: make(chan struct{})}
	self.State, self.At = leaseHeld, c.clk.Now()
	res, err := h.write(ctx, topic, self)
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("writing the lease to %s: %w", topic, err)
	}
	// Claims written after our read and before ours came first.
	held := map[string]Lease{}
	err = topicread.To(ctx, rd, topic, map[int32]int64{0: res.Offset + 1}, onLease(func(l Lease) {
		if l.State == leaseHeld {
			held[l.Holder] = l
		} else {
			delete(held, l.Holder)
		}
	}))
	delete(held, self.Holder)
	if err == nil {
		for _, l := range held {
			err = &BusyError{DLQ: c.t.DLQ, Lease: l, TTL: c.ttl}
		}
	}
	if err != nil {
		h.release(context.WithoutCancel(ctx), topic)
		return nil, err
	}
	for _, l := range dead {
		h.releaseDead(ctx, c, topic, l)
	}
	h.renew(c, topic)
	return h, nil
}

// onLease calls fn with each lease record.
func onLease(fn func(Lease)) func(*kgo.Record) {
	return func(r *kgo.Record) {
		var l Lease
		if string(r.Key) == leaseKey && json.Unmarshal(r.Value, &l) == nil {
			fn(l)
		}
	}
}

// heldLeases reads the marks topic (read_uncommitted: lease records are
// not transactional) to its end and returns the reader, positioned there,
// and every holder whose last lease record is held, in log order of that
// record. Not only the last lease record counts: an operation that was
// taken over (paused past the TTL) writes its renewals and its release
// after the newer holder's claim, and that release frees nothing. Close
// the reader.
func (c *Client) heldLeases(ctx context.Context, topic string) (*kgo.Client, []Lease, error) {
	ends, err := c.adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing %s: %w", topic, err)
	}
	end := int64(0)
	if o, ok := ends.Lookup(topic, 0); ok {
		end = o.Offset
	}
	// Nothing to read when every record is gone (deleted records, or a
	// marks topic that is not compacted: ensureMarks refuses one now):
	// the read would wait for a record below end that is no longer there.
	if starts, err := c.adm.ListStartOffsets(ctx, topic); err == nil {
		if o, ok := starts.Lookup(topic, 0); ok && o.Err == nil && o.Offset >= end {
			end = 0
		}
	}
	rd, err := kgo.NewClient(append(slices.Clone(c.opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return nil, nil, err
	}
	var held []Lease
	if end > 0 {
		if err := topicread.To(ctx, rd, topic, map[int32]int64{0: end}, onLease(func(l Lease) {
			held = slices.DeleteFunc(held, func(h Lease) bool { return h.Holder == l.Holder })
			if l.State == leaseHeld {
				held = append(held, l)
			}
		})); err != nil {
			rd.Close()
			return nil, nil, err
		}
	}
	return rd, held, nil
}

// watchHolders waits up to the lease TTL for a sign of life of any holder
// (a renewal, or a new claim: busy) or the release of all of them, and
// returns those not renewed by then: they belonged to a process that died.
// Every holder is watched, whatever the time its last write carries: that
// time is its host's clock, and a newcomer whose clock ran more than two
// TTLs ahead took over a live operation when a holder that looked that old
// was not watched (found by a breaker helper). A dead holder costs one
// wait: its taker releases it (releaseDead).
func (c *Client) watchHolders(ctx context.Context, rd *kgo.Client, holders []Lease) ([]Lease, error) {
	live := map[string]Lease{}
	for _, l := range holders {
		live[l.Holder] = l
	}
	deadline := time.Now().Add(c.ttl)
	for len(live) > 0 && time.Now().Before(deadline) {
		pctx, cancel := context.WithDeadline(ctx, deadline)
		fs := rd.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var busy error
		fs.EachRecord(func(r *kgo.Record) {
			var n Lease
			if string(r.Key) != leaseKey || json.Unmarshal(r.Value, &n) != nil {
				return
			}
			if n.State == leaseHeld {
				busy = &BusyError{DLQ: c.t.DLQ, Lease: n, TTL: c.ttl}
			} else {
				delete(live, n.Holder)
			}
		})
		if busy != nil {
			return nil, busy
		}
	}
	var dead []Lease
	for _, l := range live {
		c.log.Warn("taking over the lease of an operation not renewed for the lease TTL (killed?)", "dlq", c.t.DLQ, "holder", l.Holder, "by", l.By, "host", l.Host, "pid", l.PID, "last_renewed", l.At, "ttl", c.ttl)
		dead = append(dead, l)
	}
	return dead, nil
}

// releaseDead writes the release of l, a holder that died (watchHolders),
// after our own claim, so that the operations after ours do not watch it
// again. Not written (the brokers went away), the next one watches it for
// one TTL more, as we did.
func (h *heldLease) releaseDead(ctx context.Context, c *Client, topic string, l Lease) {
	l.State, l.At = leaseReleased, c.clk.Now()
	if _, err := h.write(ctx, topic, l); err != nil {
		c.log.Warn("releasing the lease of an operation that died; the next operation watches it again", "dlq", c.t.DLQ, "holder", l.Holder, "err", err)
	}
}

// write produces one lease record.
func (h *heldLease) write(ctx context.Context, topic string, l Lease) (*kgo.Record, error) {
	v, _ := json.Marshal(l)
	r := &kgo.Record{Topic: topic, Partition: 0, Key: []byte(leaseKey), Value: v, Timestamp: l.At}
	perr, err := produce(ctx, h.pr, r) // bounded by ctx, also with the brokers down
	return r, errors.Join(perr, err)
}

// renew rewrites the lease every TTL/4 until release.
func (h *heldLease) renew(c *Client, topic string) {
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		t := time.NewTicker(c.ttl / 4)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
			l := h.self
			l.State, l.At = leaseHeld, c.clk.Now()
			ctx, cancel := context.WithTimeout(context.Background(), c.ttl/2)
			if _, err := h.write(ctx, topic, l); err != nil {
				c.log.Warn("renewing the DLQ lease failed; retrying", "dlq", c.t.DLQ, "err", err)
			}
			cancel()
		}
	}()
}

// release stops the renewals and writes the release.
func (h *heldLease) release(ctx context.Context, topic string) {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	h.done.Wait()
	l := h.self
	l.State, l.At = leaseReleased, time.Now()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, _ = h.write(ctx, topic, l) // not written: the lease lapses after its TTL
	h.pr.Close()
}

// hostPID is this process's host name and pid, for the lease.
func hostPID() (string, int) {
	h, _ := os.Hostname()
	return h, os.Getpid()
}
