package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/topicread"
	"github.com/kretry/kretry/retrytopics"
)

// Topic names the stages of one source topic that the DLQ tools use.
type Topic struct {
	// Source is the source topic (topics[].name).
	Source string `json:"source"`
	// DLQ is its dead-letter topic.
	DLQ string `json:"dlq"`
	// Tier is its first retry tier, where redriven records go; "" when the
	// topic has no tiers (then it cannot be redriven).
	Tier string `json:"tier,omitempty"`
}

// Client reads and moves the records of one DLQ.
type Client struct {
	t    Topic
	opts []kgo.Opt
	cl   *kgo.Client
	adm  *kadm.Client
	log  *slog.Logger
	ttl  time.Duration
	clk  clock
	// endTxn ends a transaction: kgo's EndTransaction, replaced in tests
	// by one that aborts and reports nil as franz-go did (verify.go).
	endTxn func(context.Context, *kgo.Client, kgo.TransactionEndTry) error
}

// Option configures a Client.
type Option func(*Client)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *Client) { c.log = l } }

// WithLeaseTTL sets how long a lease that is not renewed stays valid
// (default DefaultLeaseTTL). Every operation on one DLQ must use the same.
func WithLeaseTTL(d time.Duration) Option { return func(c *Client) { c.ttl = d } }

// DefaultLeaseTTL is how long an operation's lease outlives its last
// renewal: a redrive killed with kill -9 blocks the next one for at most
// this long.
const DefaultLeaseTTL = 10 * time.Second

// New returns a Client for t. opts are the connection options (seed
// brokers, TLS, SASL); New adds what each reader or writer needs. Close it.
func New(t Topic, opts []kgo.Opt, o ...Option) (*Client, error) {
	if t.Source == "" || t.DLQ == "" {
		return nil, errors.New("dlq: Topic.Source and Topic.DLQ are required")
	}
	c := &Client{t: t, opts: opts, log: slog.New(slog.DiscardHandler), ttl: DefaultLeaseTTL, clk: realClock{},
		endTxn: func(ctx context.Context, tx *kgo.Client, how kgo.TransactionEndTry) error {
			return tx.EndTransaction(ctx, how)
		}}
	for _, f := range o {
		f(c)
	}
	// A short metadata age: topics this client asks about are created by
	// others (the engine, an earlier redrive), and kgo would answer from a
	// cache that says "unknown" for up to 5s.
	cl, err := kgo.NewClient(append(slices.Clone(opts), kgo.MetadataMinAge(250*time.Millisecond))...)
	if err != nil {
		return nil, err
	}
	c.cl, c.adm = cl, kadm.NewClient(cl)
	return c, nil
}

// Close closes the client's connections.
func (c *Client) Close() { c.cl.Close() }

// ErrNotDLQ reports a topic that is not a kretry DLQ.
var ErrNotDLQ = errors.New("not a kretry DLQ")

// State is what became of a DLQ record.
type State string

// States.
const (
	Waiting   State = "waiting"
	Redriven  State = "redriven"
	Discarded State = "discarded"
)

// Entry is one record of the DLQ with what kretry knows of it.
type Entry struct {
	Partition int32
	Offset    int64
	// Timestamp is the record's: when it was dead-lettered.
	Timestamp time.Time
	Key       []byte // nil: null key
	Value     []byte // nil: tombstone
	// Headers are all of the record's headers, kretry's first.
	Headers []kgo.RecordHeader
	// DLQRecord is what the kretry headers say (zero values where they
	// are unreadable).
	retrytopics.DLQRecord
	// ID is the original's ce-id, "" when the headers are unreadable.
	ID string
	// Problem says why the record cannot be redriven ("" when it can):
	// kretry headers missing or unreadable, or written for another topic.
	Problem string
	State   State
	Mark    *Mark
}

// Snapshot is the DLQ as read at one moment, up to its last stable offset.
type Snapshot struct {
	Entries []*Entry
	// Ends is each partition's last stable offset when it was read.
	Ends map[int32]int64
	// Starts is each partition's log start offset when it was read.
	Starts map[int32]int64
	// MarksOpenFrom is the marks topic's last stable offset when a
	// transaction was open on it as it was read (-1: none): a redrive or
	// discard running then, or another producer's transaction left open.
	// The marks past it were not read, so the records they mark are
	// listed as waiting until it ends.
	MarksOpenFrom int64
}

// Read reads the DLQ and its marks, up to their last stable offsets, in
// partition and offset order. It returns ErrNotDLQ when the DLQ topic does
// not exist, or holds records of which none has kretry's headers.
func (c *Client) Read(ctx context.Context) (*Snapshot, error) {
	marks, lso, err := c.readMarks(ctx)
	if errors.Is(err, errNoTopic) {
		marks, err = nil, nil // nothing was ever redriven or discarded
	}
	if err != nil {
		return nil, err
	}
	snap, err := c.readDLQ(ctx, marks)
	if snap != nil && marks != nil {
		snap.MarksOpenFrom = c.marksOpenFrom(ctx, lso)
	}
	return snap, err
}

// marksOpenFrom is lso, the marks topic's last stable offset as read, when
// its high watermark is past it (a transaction is open; see
// Snapshot.MarksOpenFrom), and -1 otherwise or when it cannot tell.
func (c *Client) marksOpenFrom(ctx context.Context, lso int64) int64 {
	topic := MarksTopic(c.t.DLQ)
	if hwms, err := c.adm.ListEndOffsets(ctx, topic); err == nil {
		if h, ok := hwms.Lookup(topic, 0); ok && h.Err == nil && lso < h.Offset {
			return lso
		}
	}
	return -1
}

func (c *Client) readDLQ(ctx context.Context, marks map[string]Mark) (*Snapshot, error) {
	snap := &Snapshot{MarksOpenFrom: -1}
	readable := 0
	ends, starts, err := c.readTopic(ctx, c.t.DLQ, true, func(r *kgo.Record) {
		e := c.entry(r)
		if e.Problem == "" {
			readable++
		}
		if m, ok := marks[markKey(e.Partition, e.Offset)]; ok && m.ID == e.ID && m.Timestamp == e.Timestamp.UnixMilli() {
			e.Mark, e.State = &m, State(m.Action)
		}
		snap.Entries = append(snap.Entries, e)
	})
	if errors.Is(err, errNoTopic) {
		return nil, fmt.Errorf("%w: %s does not exist (kretry run creates it; check topics[].dlq.topic of %q)", ErrNotDLQ, c.t.DLQ, c.t.Source)
	}
	if err != nil {
		return nil, err
	}
	snap.Ends, snap.Starts = ends, starts
	if len(snap.Entries) > 0 && readable == 0 {
		return nil, fmt.Errorf("%w: %s holds %d records and none has kretry's headers (kretry-stage %s, kretry-original-topic %s): check topics[].dlq.topic of %q",
			ErrNotDLQ, c.t.DLQ, len(snap.Entries), c.t.DLQ, c.t.Source, c.t.Source)
	}
	slices.SortFunc(snap.Entries, func(a, b *Entry) int {
		if a.Partition != b.Partition {
			return int(a.Partition - b.Partition)
		}
		return int(a.Offset - b.Offset)
	})
	return snap, nil
}

// entry builds the Entry of DLQ record r (not yet marked).
func (c *Client) entry(r *kgo.Record) *Entry {
	e := &Entry{Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value, Headers: r.Headers, State: Waiting}
	d, err := retrytopics.ReadDLQRecord(r)
	e.DLQRecord = d
	switch {
	case err != nil:
		e.Problem = err.Error() + "; the original ce-id and headers are unknown: produce it to " + c.t.Source + " yourself, or discard it"
		e.Redrives, e.RedriveID = 0, ""
	case d.Stage != c.t.DLQ:
		e.Problem = fmt.Sprintf("kretry-stage is %q, not %s: written for another DLQ", d.Stage, c.t.DLQ)
	case d.Origin.Topic != c.t.Source:
		e.Problem = fmt.Sprintf("kretry-original-topic is %q, not %s: a record of another source", d.Origin.Topic, c.t.Source)
	}
	if err == nil {
		e.ID = d.Origin.ID()
	}
	return e
}

// readMarks reads the marks topic (read_committed), latest mark per key,
// and returns the last stable offset it read to. A missing marks topic is
// errNoTopic.
func (c *Client) readMarks(ctx context.Context) (map[string]Mark, int64, error) {
	marks := map[string]Mark{}
	lsos, _, err := c.readTopic(ctx, MarksTopic(c.t.DLQ), true, func(r *kgo.Record) {
		if _, _, ok := parseMarkKey(string(r.Key)); !ok {
			return // the lease, or not ours
		}
		var m Mark
		if json.Unmarshal(r.Value, &m) == nil && (m.Action == ActionRedrive || m.Action == ActionDiscard) {
			marks[string(r.Key)] = m
		}
	})
	return marks, lsos[0], err
}

var errNoTopic = errors.New("topic does not exist")

// readTopic calls fn with every record of topic, from each partition's log
// start to its end when called: the last stable offset (committed, with
// read_committed) or the high watermark. It returns those ends and the log
// start offsets. It reads the control records too, so it knows when it
// reached an end that is a transaction marker.
func (c *Client) readTopic(ctx context.Context, topic string, committed bool, fn func(*kgo.Record)) (ends, starts map[int32]int64, err error) {
	list := c.adm.ListEndOffsets
	if committed {
		list = c.adm.ListCommittedOffsets
	}
	listed, err := list(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) || (err == nil && len(listed[topic]) == 0) {
		// The client's metadata cache may hold the topic as missing for a
		// while after another process created it: ask the brokers.
		if !c.exists(ctx, topic) {
			return nil, nil, fmt.Errorf("%s: %w", topic, errNoTopic)
		}
		c.cl.ForceMetadataRefresh()
		listed, err = c.waitEnds(ctx, topic, list)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	listedStarts, err := c.adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = listedStarts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("listing the start offsets of %s: %w", topic, err)
	}
	ends, starts = map[int32]int64{}, map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		ends[o.Partition], starts[o.Partition] = o.Offset, o.Offset
		if s, ok := listedStarts.Lookup(topic, o.Partition); ok && s.Offset <= o.Offset {
			starts[o.Partition] = s.Offset
		}
	})
	return ends, starts, topicread.Range(ctx, c.opts, topic, committed, starts, ends, fn)
}

// exists asks the brokers, past the metadata cache, whether topic exists.
func (c *Client) exists(ctx context.Context, topic string) bool {
	tds, err := c.adm.ListTopics(kadm.WithAuthorizedOps(ctx), topic)
	if err != nil {
		return true // unknown: let the next call say what is wrong
	}
	td, ok := tds[topic]
	return ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition)
}

// waitEnds lists the end offsets of a topic that exists until the client's
// metadata knows it (at most 10s).
func (c *Client) waitEnds(ctx context.Context, topic string, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ends, err := list(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil && len(ends[topic]) > 0 {
			return ends, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("listing the end offsets of %s: %v", topic, err)
		}
		c.cl.ForceMetadataRefresh()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
