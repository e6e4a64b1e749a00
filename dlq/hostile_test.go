package dlq_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
)

// endOffsets returns the high watermark of each partition of topics.
func endOffsets(t *testing.T, e *env, topics ...string) map[string]int64 {
	t.Helper()
	ends, err := e.adm.ListEndOffsets(context.Background(), topics...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
		}
		out[o.Topic+"/"+strconv.Itoa(int(o.Partition))] = o.Offset
	})
	return out
}

// TestDryRunWritesNothing: a dry run of redrive and of discard selects
// records but leaves the marks topic and the first tier as they were.
func TestDryRunWritesNothing(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 3)
	// Before any move the marks topic does not exist; a dry run does not
	// create it.
	if res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionDiscard, Reason: "dry", DryRun: true}); err != nil || len(res.Entries) != 3 {
		t.Fatalf("first dry run: %+v, %v; want 3 selected", res, err)
	}
	if tds, err := e.adm.ListTopics(context.Background(), dlq.MarksTopic(e.plan.DLQ)); err != nil || tds.Has(dlq.MarksTopic(e.plan.DLQ)) {
		t.Fatalf("after a dry run on a fresh DLQ: %v (err %v), want no marks topic", tds.Names(), err)
	}
	// A real redrive of one record creates the marks topic and writes once.
	if res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Filter: dlq.Filter{Records: []string{snap.Entries[0].Ref()}}, Rate: -1}); err != nil || res.Moved != 1 {
		t.Fatalf("redrive of one: %+v, %v", res, err)
	}
	topics := []string{dlq.MarksTopic(e.plan.DLQ), e.plan.Tiers[0].Topic, e.plan.DLQ}
	before := endOffsets(t, e, topics...)
	for _, req := range []dlq.Request{
		{Action: dlq.ActionRedrive, DryRun: true, Rate: -1},
		{Action: dlq.ActionDiscard, DryRun: true, Reason: "dry", Rate: -1},
	} {
		res, err := c.Move(context.Background(), req)
		if err != nil || len(res.Entries) != 2 || res.Moved != 0 {
			t.Fatalf("%s dry run: %+v, %v; want 2 selected, 0 moved", req.Action, res, err)
		}
	}
	if after := endOffsets(t, e, topics...); !mapsEqual(before, after) {
		t.Fatalf("a dry run wrote: end offsets %v, then %v", before, after)
	}
	if st := dlq.StatsOf(mustRead(t, c).Entries); st.Waiting != 2 || st.Redriven != 1 || st.Discarded != 0 {
		t.Fatalf("stats after dry runs %+v, want 2 waiting, 1 redriven", st)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func mustRead(t *testing.T, c *dlq.Client) *dlq.Snapshot {
	t.Helper()
	s, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHostileRecordsRedriveOrAreRefused: DLQ records with kretry's headers
// and a nil key, nil or empty value, binary key, non-UTF-8 header, or a
// kretry header twice, or no readable kretry header, are each redriven
// (and delivered) or refused with a reason and then discardable; none is
// lost and the engine keeps running.
func TestHostileRecordsRedriveOrAreRefused(t *testing.T) {
	e := newEnv(t, 1, 50*time.Millisecond)
	c := e.client()
	orig := deadLetter(t, e, c, 1).Entries[0]
	kretryHdr := slices.IndexFunc(orig.Headers, func(h kgo.RecordHeader) bool { return strings.HasPrefix(h.Key, "kretry-") })
	if kretryHdr < 0 {
		t.Fatalf("no kretry- header in %v", orig.Headers)
	}
	with := func(key, value []byte, extra ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: e.plan.DLQ, Key: key, Value: value, Headers: append(slices.Clone(orig.Headers), extra...)}
	}
	dup := orig.Headers[kretryHdr]
	e.produce(
		with(nil, orig.Value),
		with(orig.Key, nil),
		with(orig.Key, []byte{}),
		with([]byte{0xff, 0xfe, 0x00, 0xc3, 0x28}, orig.Value),
		with(orig.Key, orig.Value, kgo.RecordHeader{Key: "\xff\xfe", Value: []byte{0xc3, 0x28}}),
		with(orig.Key, orig.Value, dup),
		with(orig.Key, orig.Value, kgo.RecordHeader{Key: dup.Key, Value: []byte("\xffgarbage")}),
		&kgo.Record{Topic: e.plan.DLQ, Key: []byte{0xff}, Headers: []kgo.RecordHeader{{Key: "kretry-attempt", Value: []byte{0xff, 0xfe}}}},
	)
	e.waitDLQ(c, 9)
	res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1, By: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Selected != 9 || res.Moved+len(res.Refused) != 9 || !slices.ContainsFunc(res.Refused, func(r dlq.Refusal) bool { return strings.Contains(r.Reason, "kretry headers missing or unreadable") }) {
		t.Fatalf("selected %d, moved %d, refused %v; want 9 = moved + refused, the one without readable kretry headers refused", res.Selected, res.Moved, res.Refused)
	}
	for _, r := range res.Refused {
		if r.Reason == "" {
			t.Errorf("%s refused without a reason", r.Record)
		}
		t.Logf("refused %s: %s", r.Record, r.Reason)
	}
	eventually(t, "every moved record delivered", func() bool { return len(e.app.redriven()) >= res.Moved })
	for _, m := range e.app.redriven() {
		if m.ID != orig.ID || m.Redrives != 1 || m.Attempt != 1 || m.Topic != e.plan.Source {
			t.Errorf("redriven delivery %s (topic %s, attempt %d, redrive %d), want %s, attempt 1, redrive 1", m.ID, m.Topic, m.Attempt, m.Redrives, orig.ID)
		}
	}
	st := dlq.StatsOf(mustRead(t, c).Entries)
	if st.Redriven != res.Moved || st.Waiting != len(res.Refused) {
		t.Fatalf("stats %+v, want %d redriven, %d waiting", st, res.Moved, len(res.Refused))
	}
	// The refused ones can still be discarded.
	dc, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionDiscard, Reason: "hostile", Rate: -1})
	if err != nil || dc.Moved != len(res.Refused) {
		t.Fatalf("discard of the refused: %+v, %v; want %d moved", dc, err, len(res.Refused))
	}
	if st := dlq.StatsOf(mustRead(t, c).Entries); st.Waiting != 0 || st.Discarded != len(res.Refused) {
		t.Fatalf("stats after the discard %+v, want 0 waiting, %d discarded", st, len(res.Refused))
	}
}

// TestAbortedDLQRecordsAreNotListed: the DLQ is read read_committed; what a
// transaction aborted there is neither listed nor redriven.
func TestAbortedDLQRecordsAreNotListed(t *testing.T) {
	e := newEnv(t, 1, 50*time.Millisecond)
	c := e.client()
	orig := deadLetter(t, e, c, 1).Entries[0]
	tx, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.TransactionalID("hostile-"+e.plan.DLQ), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	ctx := context.Background()
	for _, commit := range []kgo.TransactionEndTry{kgo.TryAbort, kgo.TryCommit} {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: e.plan.DLQ, Key: orig.Key, Value: []byte("aborted"), Headers: orig.Headers}
		if commit {
			r.Value = []byte("committed")
		}
		if err := tx.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := tx.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	snap := e.waitDLQ(c, 2)
	for _, en := range snap.Entries {
		if string(en.Value) == "aborted" {
			t.Fatalf("aborted record %s listed", en.Ref())
		}
	}
	if string(snap.Entries[1].Value) != "committed" {
		t.Fatalf("second entry %q, want the committed one", snap.Entries[1].Value)
	}
}
