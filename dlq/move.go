package dlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/kretry/kretry/retrytopics"
)

// DefaultRate is the redrive and discard rate when Request.Rate is 0
// (records/s): modest on purpose, since a bad redrive is the next outage.
const DefaultRate = 10

// MinRate is the lowest positive rate (records/s) a redrive or discard
// takes: below it one record would take over 100 s and the operation would
// hold the DLQ's lease for ever in effect (at 1e-300 records/s, after its
// first move).
const MinRate = 0.01

// Request is one redrive or discard.
type Request struct {
	// Action is ActionRedrive or ActionDiscard.
	Action string
	// Filter selects the records; only waiting ones are ever moved.
	Filter Filter
	// Limit moves at most this many records (0: all selected).
	Limit int
	// Rate is the pace (records/s): at least MinRate; 0 means DefaultRate,
	// a negative value no limit. A positive rate below MinRate, or NaN, is
	// refused.
	Rate float64
	// DryRun selects and reports, moving nothing.
	DryRun bool
	// Reason is required for a discard: why the records are not delivered.
	Reason string
	// By is who asks (written in the marks and the log).
	By string
	// Version is the kretry version (kretry-version on redriven records).
	Version string
	// Progress, when set, is called after each committed transaction.
	Progress func(Progress)
	// Op is the operation's id; "" makes a new one (rd-… or dc-…).
	Op string
	// Started, when set, is called once the lease is held and the records
	// are selected, before the first move.
	Started func(*Result)
}

// Progress is the state of a running operation.
type Progress struct {
	Op      string        `json:"op"`
	Action  string        `json:"action"`
	Total   int           `json:"total"` // records selected to move
	Moved   int           `json:"moved"` // committed so far
	Elapsed time.Duration `json:"elapsed_ns"`
	Rate    float64       `json:"rate"`   // records/s so far; 0 (unknown) before the second move
	ETA     time.Duration `json:"eta_ns"` // at the rate so far; 0 while the rate is unknown
}

// Refusal is a selected record that cannot be moved, with the reason.
type Refusal struct {
	Record string `json:"record"` // <partition>/<offset>
	Reason string `json:"reason"`
}

// Result is what an operation did.
type Result struct {
	Op       string    `json:"op"`
	Action   string    `json:"action"`
	DryRun   bool      `json:"dry_run"`
	Selected int       `json:"selected"` // waiting records the filter and limit selected, refused ones included
	Moved    int       `json:"moved"`
	Refused  []Refusal `json:"refused,omitempty"`
	// Stopped is true when ctx ended before every selected record moved.
	Stopped bool `json:"stopped"`
	// MovedByClass counts the moved records by error class.
	MovedByClass map[string]int `json:"moved_by_class"`
	Elapsed      time.Duration  `json:"elapsed_ns"`
	// Entries are the records to move (selected, not refused).
	Entries []*Entry `json:"-"`
}

// ErrFenced reports an operation stopped because a newer one on the same
// DLQ took over its transactional id.
var ErrFenced = errors.New("fenced: a newer redrive or discard of this DLQ took over")

// Move runs req: it takes the DLQ's lease (a *BusyError when another
// operation holds it), fences any older operation, reads the marks and the
// DLQ, and moves the selected waiting records at req.Rate, in batches of
// one transaction each, until done or ctx ends (Result.Stopped; what was
// committed stays moved, and a rerun continues). Records that cannot be
// redriven (Entry.Problem) are refused and listed, never moved. A
// Filter.Records reference outside the DLQ is an ErrNoRecord.
func (c *Client) Move(ctx context.Context, req Request) (*Result, error) {
	start := c.clk.Now()
	if err := c.check(&req); err != nil {
		return nil, err
	}
	prefix := "rd"
	if req.Action == ActionDiscard {
		prefix = "dc"
	}
	if req.Op == "" {
		req.Op = newOpID(prefix, start)
	}
	res := &Result{Op: req.Op, Action: req.Action, DryRun: req.DryRun, MovedByClass: map[string]int{}}
	if req.DryRun {
		return c.dryRun(ctx, &req, res)
	}
	if !c.exists(ctx, c.t.DLQ) {
		return nil, fmt.Errorf("%w: %s does not exist (kretry run creates it; check topics[].dlq.topic of %q)", ErrNotDLQ, c.t.DLQ, c.t.Source)
	}
	if err := ensureMarks(ctx, c.cl, c.t.DLQ); err != nil {
		return nil, err
	}
	host, pid := hostPID()
	lease, err := c.acquire(ctx, Lease{Holder: res.Op, Action: actionVerb(req.Action), By: req.By, Host: host, PID: pid})
	if err != nil {
		return nil, err
	}
	defer lease.release(context.WithoutCancel(ctx), MarksTopic(c.t.DLQ))
	tx, snap, err := c.fencedSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Close()
	if err := snap.CheckRecords(c.t.DLQ, req.Filter.Records); err != nil {
		return nil, err
	}
	c.selectEntries(snap, &req, res)
	c.log.Info("dlq operation started", "op", res.Op, "action", req.Action, "dlq", c.t.DLQ, "by", req.By,
		"filter", req.Filter.String(), "limit", req.Limit, "rate", req.Rate, "selected", res.Selected, "refused", len(res.Refused))
	if req.Started != nil {
		req.Started(res)
	}
	err = c.run(ctx, tx, &req, res, c.clk.Now()) // the rate from the first move
	if res.Moved > 0 {
		c.waitMarksStable(ctx) // a Read after Move sees what it moved
	}
	res.Elapsed = c.clk.Now().Sub(start)
	c.logEnded(&req, res, err)
	return res, err
}

// dryRun fills res with what req would select and refuse in the DLQ as
// it is now, moving nothing and taking no lease. It returns Read's
// errors, and an ErrNoRecord when a Filter.Records reference is outside
// the DLQ.
func (c *Client) dryRun(ctx context.Context, req *Request, res *Result) (*Result, error) {
	snap, err := c.Read(ctx)
	if err != nil {
		return nil, err
	}
	if err := snap.CheckRecords(c.t.DLQ, req.Filter.Records); err != nil {
		return nil, err
	}
	c.selectEntries(snap, req, res)
	return res, nil
}

// logEnded logs the end of operation req: what it moved, selected and
// refused, whether it stopped early, and err when it failed.
func (c *Client) logEnded(req *Request, res *Result, err error) {
	attrs := []any{"op", res.Op, "action", req.Action, "dlq", c.t.DLQ, "by", req.By,
		"moved", res.Moved, "selected", res.Selected, "refused", len(res.Refused), "stopped", res.Stopped}
	if err != nil {
		attrs = append(attrs, "err", err) // no err=<nil> on success
	}
	c.log.Info("dlq operation ended", attrs...)
}

// fencedSnapshot starts the DLQ's transactional producer, which fences an
// older operation and aborts its open transaction (InitProducerID), and
// only then reads the marks and the DLQ: whatever the older one committed
// is seen. Close the producer.
func (c *Client) fencedSnapshot(ctx context.Context) (*kgo.Client, *Snapshot, error) {
	tx, err := kgo.NewClient(append(slices.Clone(c.opts), kgo.TransactionalID(TransactionalID(c.t.DLQ)),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(30*time.Second))...)
	if err != nil {
		return nil, nil, err
	}
	if _, _, err := tx.ProducerID(ctx); err != nil {
		tx.Close()
		return nil, nil, fmt.Errorf("initializing the transactional producer %s: %w", TransactionalID(c.t.DLQ), err)
	}
	// The marks topic exists (ensureMarks): not finding it is an error,
	// never "no marks", which would move records twice.
	marks, err := c.readMarks(ctx)
	if err != nil {
		tx.Close()
		return nil, nil, fmt.Errorf("reading the marks: %w", err)
	}
	snap, err := c.readDLQ(ctx, marks)
	if err != nil {
		tx.Close()
		return nil, nil, err
	}
	return tx, snap, nil
}

// actionVerb is the lease's word for action a: "discard" or "redrive".
func actionVerb(a string) string {
	if a == ActionDiscard {
		return "discard"
	}
	return "redrive"
}

// check validates req and fills its defaults.
func (c *Client) check(req *Request) error {
	switch req.Action {
	case ActionRedrive:
		if c.t.Tier == "" {
			return fmt.Errorf("%w: %s has no retry tiers: a redriven record goes to the first tier; add one to its retry.tiers", errBadRequest, c.t.Source)
		}
	case ActionDiscard:
		if req.Reason == "" {
			return fmt.Errorf("%w: a discard needs a reason (--reason TEXT): it is kept in the marks for audit", errBadRequest)
		}
	default:
		return fmt.Errorf("%w: action %q: want %s or %s", errBadRequest, req.Action, ActionRedrive, ActionDiscard)
	}
	if req.Limit < 0 {
		return fmt.Errorf("%w: limit %d: want 0 (all) or more", errBadRequest, req.Limit)
	}
	if err := CheckRate(req.Rate); err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if req.Rate == 0 {
		req.Rate = DefaultRate
	}
	return nil
}

// CheckRate refuses a rate (records/s) that is NaN or positive and below
// MinRate; the error names the value and the floor, the caller adds the
// flag or field.
func CheckRate(r float64) error {
	if math.IsNaN(r) || r > 0 && r < MinRate {
		return fmt.Errorf("rate %g records/s is below the floor of %g records/s (one record every %.0f s at most): give at least %g", r, MinRate, 1/MinRate, MinRate)
	}
	return nil
}

// selectEntries fills res with the waiting records of snap that req
// selects, up to its limit; records that cannot be redriven are refused.
func (c *Client) selectEntries(snap *Snapshot, req *Request, res *Result) {
	f := req.Filter
	f.States = []State{Waiting}
	for _, e := range snap.Entries {
		if !f.Match(e) {
			continue
		}
		if req.Limit > 0 && len(res.Entries) >= req.Limit {
			break
		}
		res.Selected++
		if req.Action == ActionRedrive && e.Problem != "" {
			res.Refused = append(res.Refused, Refusal{Record: e.Ref(), Reason: e.Problem})
			continue
		}
		res.Entries = append(res.Entries, e)
	}
}

// Batching: a transaction carries at most maxBatch records and is
// committed at most batchSpan after its first record was taken, so the
// progress is current and a transaction never holds the DLQ's readers
// (read_committed) back for long.
const (
	maxBatch  = 100
	batchSpan = 250 * time.Millisecond
)

// run moves res.Entries in paced batches, each committed in one
// transaction of tx. It returns the first commit's error; a ctx that ends
// commits what was gathered and sets res.Stopped.
func (c *Client) run(ctx context.Context, tx *kgo.Client, req *Request, res *Result, start time.Time) error {
	var lim *rate.Limiter
	if req.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(req.Rate), 1)
	}
	maxBytes := 0
	if req.Action == ActionRedrive {
		maxBytes = c.maxMessageBytes(ctx, c.t.Tier)
	}
	rd := retrytopics.Redrive{Tier: c.t.Tier, ID: res.Op, Version: req.Version, MaxBytes: maxBytes}
	b := &batch{c: c, tx: tx, req: req, res: res, start: start}
	for _, e := range res.Entries {
		if lim != nil {
			now := c.clk.Now()
			r := lim.ReserveN(now, 1)
			d := r.DelayFrom(now)
			if len(b.recs) > 0 && now.Add(d).Sub(b.began) > batchSpan {
				if err := b.flush(ctx); err != nil {
					return err
				}
			}
			if err := c.clk.Sleep(ctx, d); err != nil {
				r.Cancel()
				res.Stopped = true
				return b.flush(ctx)
			}
		} else if ctx.Err() != nil {
			res.Stopped = true
			return b.flush(ctx)
		}
		if len(b.recs) == 0 {
			b.began = c.clk.Now()
		}
		recs, err := c.moveRecords(e, req, &rd)
		if err != nil {
			res.Refused = append(res.Refused, Refusal{Record: e.Ref(), Reason: err.Error()})
			continue
		}
		b.recs = append(b.recs, recs...)
		b.classes = append(b.classes, e.Class())
		if len(b.recs) >= maxBatch*c.recordsPerMove(req) || c.clk.Now().Sub(b.began) >= batchSpan {
			if err := b.flush(ctx); err != nil {
				return err
			}
		}
	}
	return b.flush(ctx)
}

// batch gathers the records of the moves of one transaction of
// [Client.run], and their classes.
type batch struct {
	c     *Client
	tx    *kgo.Client
	req   *Request
	res   *Result
	start time.Time // of the first move, for the rate reported

	recs    []*kgo.Record
	classes []string
	began   time.Time // when the batch's first move was taken
}

// flush commits the batch in one transaction (at most 30s, even after
// ctx ends), counts its moves in b.res, reports the progress and empties
// the batch. It returns the commit's error; an empty batch does nothing.
func (b *batch) flush(ctx context.Context) error {
	if len(b.recs) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := commit(cctx, b.tx, b.recs); err != nil {
		return err
	}
	b.res.Moved += len(b.recs) / b.c.recordsPerMove(b.req)
	for _, cl := range b.classes {
		b.res.MovedByClass[cl]++
	}
	b.recs, b.classes = b.recs[:0], b.classes[:0]
	b.c.report(b.req, b.res, b.start)
	return nil
}

// recordsPerMove is how many records one move writes: the tier record
// and the mark for a redrive, the mark for a discard.
func (c *Client) recordsPerMove(req *Request) int {
	if req.Action == ActionRedrive {
		return 2 // the tier record and the mark
	}
	return 1
}

// moveRecords returns the records one move of e writes.
func (c *Client) moveRecords(e *Entry, req *Request, rd *retrytopics.Redrive) ([]*kgo.Record, error) {
	now := c.clk.Now()
	m := Mark{Action: req.Action, Op: rd.ID, By: req.By, At: now, Reason: req.Reason}
	if req.Action == ActionDiscard {
		return []*kgo.Record{markRecord(MarksTopic(c.t.DLQ), e, m)}, nil
	}
	r := &kgo.Record{Topic: c.t.DLQ, Partition: e.Partition, Offset: e.Offset, Key: e.Key, Value: e.Value, Headers: e.Headers, Timestamp: e.Timestamp}
	out, err := rd.Record(r, now)
	if err != nil {
		return nil, err
	}
	if rd.MaxBytes > 0 && retrytopics.RecordSize(out) > rd.MaxBytes {
		return nil, fmt.Errorf("the record (%d bytes with kretry's headers) does not fit %s (max.message.bytes %d): raise it there, or discard the record",
			retrytopics.RecordSize(out), rd.Tier, rd.MaxBytes)
	}
	m.To = rd.Tier + "/" + strconv.FormatInt(int64(out.Partition), 10)
	return []*kgo.Record{out, markRecord(MarksTopic(c.t.DLQ), e, m)}, nil
}

// report calls req.Progress.
func (c *Client) report(req *Request, res *Result, start time.Time) {
	if req.Progress == nil {
		return
	}
	el := c.clk.Now().Sub(start)
	p := Progress{Op: res.Op, Action: req.Action, Total: len(res.Entries), Moved: res.Moved, Elapsed: el}
	// The first move is not paced (the token bucket's burst of one): the
	// rate is of the moves after it, over the time since it, and unknown
	// (0) until there are two. Moved/elapsed read 100/s or more after the
	// first record of a 1/s redrive.
	if s := el.Seconds(); s > 0 && res.Moved >= 2 {
		p.Rate = float64(res.Moved-1) / s
	}
	if p.Rate > 0 {
		p.ETA = time.Duration(float64(p.Total-p.Moved) / p.Rate * float64(time.Second))
	}
	req.Progress(p)
}

// maxMessageBytes is topic's max.message.bytes, 0 when unknown.
func (c *Client) maxMessageBytes(ctx context.Context, topic string) int {
	rcs, err := c.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return 0
	}
	for _, cf := range rc.Configs {
		if cf.Key == "max.message.bytes" && cf.Value != nil {
			n, _ := strconv.Atoi(*cf.Value)
			return n
		}
	}
	return 0
}
