package dlq

// The moves of a redrive or discard: paced at the request's rate, and
// committed in batches of one transaction each.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/time/rate"

	"github.com/kretry/kretry/retrytopics"
)

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
func (c *Client) run(ctx context.Context, tx *producer, req *Request, res *Result, start time.Time) error {
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
	tx    *producer
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
	if err := b.tx.commitChecked(cctx, b.recs); err != nil {
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
