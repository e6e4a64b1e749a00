package dlq

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Tracker follows a DLQ and its marks as they grow, for the metrics: how
// many records wait (not redriven, not discarded), the oldest of them, and
// the redrive results by error class. It keeps a few dozen bytes per DLQ
// record in memory.
type Tracker struct {
	c *Client

	mu      sync.Mutex
	entries map[string]trackedEntry // by <partition>/<offset>
	marks   map[string]Mark
	ready   bool // read up to the ends found at the start
}

type trackedEntry struct {
	ts        time.Time
	id        string
	class     string
	redrives  int64
	redriveID string
}

// Summary is what a Tracker knows at one moment.
type Summary struct {
	Waiting int
	// Oldest is when the oldest waiting record was dead-lettered (zero
	// when none waits).
	Oldest time.Time
	// Redriven counts the records redriven, by their error class when
	// they were; Returned those of them that came back to the DLQ (failed
	// again after the redrive).
	Redriven, Returned map[string]int
	// Ready is false until the DLQ and its marks were read to their ends
	// once: the counts are partial before.
	Ready bool
}

// NewTracker returns a tracker of c's DLQ; Run feeds it.
func NewTracker(c *Client) *Tracker {
	return &Tracker{c: c, entries: map[string]trackedEntry{}, marks: map[string]Mark{}}
}

// Run reads the DLQ and its marks (read_committed) from their log starts
// and follows them until ctx ends, and returns once its Kafka clients are
// closed. Topics that do not exist yet are picked up once created.
func (t *Tracker) Run(ctx context.Context) {
	c := t.c
	topics := []string{c.t.DLQ, MarksTopic(c.t.DLQ)}
	rd, err := kgo.NewClient(append(slices.Clone(c.opts), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.MetadataMinAge(time.Second), kgo.MetadataMaxAge(10*time.Second))...)
	if err != nil {
		c.log.Warn("DLQ metrics: cannot read the DLQ", "dlq", c.t.DLQ, "err", err)
		return
	}
	defer rd.Close()
	var ready sync.WaitGroup
	defer ready.Wait() // Run returns with no reader of its own left open
	ready.Go(func() { t.markReady(ctx) })
	for ctx.Err() == nil {
		fs := rd.PollFetches(ctx)
		t.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if r.Topic == c.t.DLQ {
				e := c.entry(r)
				t.entries[e.Ref()] = trackedEntry{ts: e.Timestamp, id: e.ID, class: e.Class(), redrives: e.Redrives, redriveID: e.RedriveID}
				return
			}
			var m Mark
			if _, _, ok := parseMarkKey(string(r.Key)); ok && json.Unmarshal(r.Value, &m) == nil {
				t.marks[string(r.Key)] = m
			}
		})
		t.mu.Unlock()
	}
}

// markReady sets Ready once the tracker holds every record below the ends
// found when it started.
func (t *Tracker) markReady(ctx context.Context) {
	var want int
	for ctx.Err() == nil {
		snap, err := t.c.Read(ctx)
		if err == nil {
			want = len(snap.Entries)
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
	for ctx.Err() == nil {
		t.mu.Lock()
		if len(t.entries) >= want {
			t.ready = true
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Summary summarizes the DLQ as read so far.
func (t *Tracker) Summary() Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Summary{Redriven: map[string]int{}, Returned: map[string]int{}, Ready: t.ready}
	redriveClass := map[string]string{} // op + ce-id → class of the redriven record
	for ref, e := range t.entries {
		m, ok := t.marks[ref]
		if ok && m.ID == e.id && m.Timestamp == e.ts.UnixMilli() {
			if m.Action == ActionRedrive {
				s.Redriven[e.class]++
				redriveClass[m.Op+"\x00"+e.id] = e.class
			}
			continue
		}
		s.Waiting++
		if s.Oldest.IsZero() || e.ts.Before(s.Oldest) {
			s.Oldest = e.ts
		}
	}
	for _, e := range t.entries {
		if e.redrives > 0 {
			if cl, ok := redriveClass[e.redriveID+"\x00"+e.id]; ok {
				s.Returned[cl]++
			}
		}
	}
	return s
}
