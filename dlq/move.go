package dlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
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
	// Skipped are the records named by Filter.Records that are not
	// waiting: redriven or discarded already (the reason says by whom,
	// when and in which operation). They are not moved.
	Skipped []Refusal `json:"skipped,omitempty"`
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

// ErrMarksUnreadable is wrapped by Move's error when the marks topic has
// an open transaction that is not the operation's own: the marks after it
// cannot be read (read_committed stops at it), so nothing is moved.
var ErrMarksUnreadable = errors.New("the marks cannot be read to their end")

// ErrMarksNotCompacted is wrapped by Move's error when the marks topic
// exists with a cleanup.policy other than compact. Nothing is moved.
var ErrMarksNotCompacted = errors.New("the marks topic is not compacted")

// ErrNoTier is wrapped by Move's error when a redrive's first retry tier
// (Topic.Tier) does not exist: the config given is not the one kretry run
// uses. Nothing is moved.
var ErrNoTier = errors.New("no such retry tier")

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
	if req.Action == ActionRedrive && c.t.Tier != "" && !c.exists(ctx, c.t.Tier) {
		// Produced to, a missing tier fails every transaction (or, on a
		// cluster that creates topics on use, is created with the
		// broker's partition count, not the source's).
		return nil, fmt.Errorf("%w: %s, the first retry tier of %q where a redrive writes, does not exist; kretry run creates it from its config's topics[].retry.tiers: use the config kretry run uses; nothing moved",
			ErrNoTier, c.t.Tier, c.t.Source)
	}
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
func (c *Client) fencedSnapshot(ctx context.Context) (*producer, *Snapshot, error) {
	tx, err := c.newProducer(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Marks are read up to the last stable offset: behind another
	// producer's open transaction, committed marks would go unseen and
	// their records be moved a second time.
	if lso, err := c.marksStable(ctx); err != nil {
		tx.Close()
		if errors.Is(err, errMarksOpenTxn) {
			topic := MarksTopic(c.t.DLQ)
			return nil, nil, fmt.Errorf("%w: %s has a transaction open since offset %d that is not kretry's (its own was just aborted): the marks after it cannot be read, and moving now could move records a second time; "+
				"wait for it to end, or abort it (kafka-transactions.sh --bootstrap-server BROKER abort --topic %s --partition 0 --start-offset %d); nothing moved",
				ErrMarksUnreadable, topic, lso, topic, lso)
		}
		return nil, nil, fmt.Errorf("reading the marks: %w", err)
	}
	// The marks topic exists (ensureMarks): not finding it is an error,
	// never "no marks", which would move records twice.
	marks, _, err := c.readMarks(ctx) // stable above: no transaction of another open
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
// handled says what became of a DLQ record that m marks: "already
// redriven by NAME at TIME (op ID)".
func handled(m *Mark) string {
	verb := "redriven"
	if m.Action == ActionDiscard {
		verb = "discarded"
	}
	s := fmt.Sprintf("already %s by %s at %s (op %s)", verb, m.By, m.At.UTC().Format(time.RFC3339), m.Op)
	if m.Reason != "" {
		s += ": " + m.Reason
	}
	return s
}

func (c *Client) selectEntries(snap *Snapshot, req *Request, res *Result) {
	f := req.Filter
	f.States = []State{Waiting}
	named := req.Filter
	named.States = []State{Redriven, Discarded}
	for _, e := range snap.Entries {
		if !f.Match(e) {
			if len(named.Records) > 0 && e.Mark != nil && named.Match(e) { // named, handled already
				res.Skipped = append(res.Skipped, Refusal{Record: e.Ref(), Reason: handled(e.Mark)})
			}
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
