package lag_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/offsetmap"
	"github.com/kretry/kretry/lag"
)

// TestLagStates checks each partition state of the issue on the embedded
// broker, one partition per state.
func TestLagStates(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 6)
	old := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	for p := range int32(6) {
		c.produce("orders", p, 10, old)
	}
	// p0: committed in the middle.
	c.commit("app", "orders", 0, 4)
	// p1: no commit (a row only because the group expects the topic).
	// p2: committed below the log start after retention.
	c.commit("app", "orders", 2, 2)
	c.deleteRecords("orders", 2, 6)
	// p3: committed past the end.
	c.commit("app", "orders", 3, 25)
	// p4: caught up.
	c.commit("app", "orders", 4, 10)
	// p5: no commit, log start moved.
	c.deleteRecords("orders", 5, 7)

	clock := &fixedClock{t: time.Now()}
	m := c.monitor(lag.Config{Groups: []lag.Group{{Name: "app", Topics: []lag.Topic{{Name: "orders"}}}}}, lag.WithClock(clock.now))
	snap := scan(t, m)

	for _, tc := range []struct {
		p         int32
		committed int64
		lag       int64
		flags     lag.Flags
		logStart  int64
	}{
		{0, 4, 6, lag.Flags{}, 0},
		{1, -1, 10, lag.Flags{NoCommit: true}, 0},
		{2, 2, 4, lag.Flags{Clamped: true}, 6},
		{3, 25, 0, lag.Flags{PastEnd: true}, 0},
		{4, 10, 0, lag.Flags{}, 0},
		{5, -1, 3, lag.Flags{NoCommit: true}, 7},
	} {
		r := findRow(t, snap, "app", "orders", tc.p)
		if r.Error != "" {
			t.Errorf("p%d: error %s", tc.p, r.Error)
			continue
		}
		if r.Committed != tc.committed || r.Lag != tc.lag || r.Flags != tc.flags || r.LogStart != tc.logStart || r.HighWatermark != 10 || r.End != 10 {
			t.Errorf("p%d: committed %d lag %d flags %+v start %d hwm %d end %d; want committed %d lag %d flags %+v start %d hwm 10",
				tc.p, r.Committed, r.Lag, r.Flags, r.LogStart, r.HighWatermark, r.End, tc.committed, tc.lag, tc.flags, tc.logStart)
		}
		wantAge := time.Duration(0)
		if tc.lag > 0 {
			wantAge = clock.t.Sub(old)
		}
		if !r.AgeKnown || r.Age != wantAge {
			t.Errorf("p%d: age %v (known %v), want %v", tc.p, r.Age, r.AgeKnown, wantAge)
		}
		if r.Status != lag.StatusOK {
			t.Errorf("p%d: status %v after one scan, want OK", tc.p, r.Status)
		}
	}
}

// TestLagLeavesOutWhatTheCommitMarksDone: kretry commits the offset of
// its first record not done, with metadata naming the records past it
// still pending (internal/offsetmap); the lag counts only those and the
// records past the map, the rest is DoneAhead.
func TestLagLeavesOutWhatTheCommitMarksDone(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 1)
	old := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	c.produce("orders", 0, 20, old)
	// Offsets 2 and 5-6 pending, 3-4 and 7-11 done, 12-19 not read yet.
	ch := offsetmap.Choose([]offsetmap.Span{{From: 2, To: 3}, {From: 5, To: 7}}, 12, 0, 0)
	c.commitMeta("orders-kretry", "orders", 0, ch.Committed, ch.Metadata)
	m := c.monitor(lag.Config{Groups: []lag.Group{{Name: "orders-kretry", ReadCommitted: true, Topics: []lag.Topic{{Name: "orders"}}}}})
	r := findRow(t, scan(t, m), "orders-kretry", "orders", 0)
	if r.Error != "" || r.Committed != 2 || r.Lag != 11 || r.DoneAhead != 7 {
		t.Fatalf("committed %d lag %d done ahead %d (%s), want 2, 11 (3 pending + 8 not read) and 7", r.Committed, r.Lag, r.DoneAhead, r.Error)
	}
	if lag.DoneAhead(2, 20, "member-1") != 0 || lag.DoneAhead(3, 20, ch.Metadata) != 0 {
		t.Fatal("metadata of another writer, or of another offset, marks something done")
	}
	if n := lag.DoneAhead(2, 6, ch.Metadata); n != 2 {
		t.Fatalf("DoneAhead below an end of 6: %d, want 2 (offsets 3 and 4)", n)
	}
}

// TestLagForeignGroupRows: a group without expected topics gets rows for
// its committed partitions only.
func TestLagForeignGroupRows(t *testing.T) {
	c := newCluster(t)
	c.createTopic("events", 3)
	c.produce("events", 1, 5, time.Now())
	c.commit("app", "events", 1, 2)
	m := c.monitor(lag.Config{Groups: []lag.Group{{Name: "app"}}})
	snap := scan(t, m)
	if len(snap.Rows) != 1 {
		t.Fatalf("rows = %+v, want one for events[1]", snap.Rows)
	}
	if r := snap.Rows[0]; r.Partition != 1 || r.Lag != 3 || r.Stage != "" {
		t.Errorf("row = %+v", r)
	}
}

// TestLagAge: the age is from the timestamp of the record at the committed
// offset, per group, also when groups sit at different offsets of one
// partition.
func TestLagAge(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 1)
	now := time.Now().Truncate(time.Millisecond)
	for i := range 5 {
		c.produce("orders", 0, 2, now.Add(-time.Duration(10-i)*time.Minute)) // offsets 2i, 2i+1 at now-(10-i)m
	}
	groups := []lag.Group{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	c.commit("a", "orders", 0, 0)
	c.commit("b", "orders", 0, 5)
	c.commit("c", "orders", 0, 9)
	clock := &fixedClock{t: now}
	m := c.monitor(lag.Config{Groups: groups}, lag.WithClock(clock.now))
	snap := scan(t, m)
	for g, want := range map[string]time.Duration{"a": 10 * time.Minute, "b": 8 * time.Minute, "c": 6 * time.Minute} {
		r := findRow(t, snap, g, "orders", 0)
		if !r.AgeKnown || r.Age != want {
			t.Errorf("group %s: age %v (known %v), want %v", g, r.Age, r.AgeKnown, want)
		}
	}
	// A record from a producer whose clock runs ahead: age 0, not negative.
	c.produce("orders", 0, 1, now.Add(time.Hour))
	c.commit("c", "orders", 0, 10)
	if r := findRow(t, scan(t, m), "c", "orders", 0); !r.AgeKnown || r.Age != 0 || r.Lag != 1 {
		t.Errorf("future record: %+v", r)
	}
}

// TestLagTransactions: a tail of transaction markers is no lag; records of
// an open transaction are no lag for read_committed groups; aborted
// records are none either.
func TestLagTransactions(t *testing.T) {
	c := newCluster(t)
	c.createTopic("tx", 3)
	yes, no := true, false
	old := time.Now().Add(-time.Minute)

	// p0: 5 committed records, then the commit marker at offset 5.
	c.produceTxn("tx", 0, 5, old, &yes)
	c.commit("rc", "tx", 0, 5) // what a transactional consumer commits: last record + 1
	c.commit("ru", "tx", 0, 5)
	// p1: 3 records then an abort marker, nothing to consume.
	c.produceTxn("tx", 1, 3, old, &no)
	c.commit("rc", "tx", 1, 0)
	c.commit("ru", "tx", 1, 0)
	// p2: 2 committed records (+ marker), then an open transaction of 4.
	c.produceTxn("tx", 2, 2, old, &yes)
	open := c.produceTxn("tx", 2, 4, old, nil)
	c.commit("rc", "tx", 2, 3)
	c.commit("ru", "tx", 2, 3)

	m := c.monitor(lag.Config{Groups: []lag.Group{{Name: "rc", ReadCommitted: true}, {Name: "ru"}}})
	snap := scan(t, m)
	for _, tc := range []struct {
		group       string
		p           int32
		lag, end    int64
		markersOnly bool
	}{
		{"rc", 0, 0, 6, true},
		{"ru", 0, 0, 6, true},
		{"rc", 1, 0, 4, true},
		{"ru", 1, 4, 4, false}, // read_uncommitted consumes aborted records; the marker's offset counts
		{"rc", 2, 0, 3, false}, // caught up to the last stable offset
		{"ru", 2, 4, 7, false},
	} {
		r := findRow(t, snap, tc.group, "tx", tc.p)
		if r.Error != "" || r.Lag != tc.lag || r.End != tc.end || r.MarkersOnly != tc.markersOnly {
			t.Errorf("%s tx[%d]: lag %d end %d markers-only %v err %q; want lag %d end %d markers-only %v",
				tc.group, tc.p, r.Lag, r.End, r.MarkersOnly, r.Error, tc.lag, tc.end, tc.markersOnly)
		}
	}

	// The open transaction commits: now the read_committed group lags by
	// the 4 records (plus the marker's offset, which is counted until it
	// is the whole tail).
	if err := open.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	snap = scan(t, m)
	if r := findRow(t, snap, "rc", "tx", 2); r.Lag != 5 || r.End != 8 || !r.AgeKnown || r.Age < time.Minute {
		t.Errorf("after commit: %+v", r)
	}
	c.commit("rc", "tx", 2, 7)
	if r := findRow(t, scan(t, m), "rc", "tx", 2); r.Lag != 0 || !r.MarkersOnly {
		t.Errorf("caught up after commit: %+v", r)
	}
}

// TestLagEmptyGroupGrows: a group without members keeps its commits; its
// lag is reported and grows, and its status turns STOP after a window.
func TestLagEmptyGroupGrows(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 1)
	c.produce("orders", 0, 3, time.Now())
	c.commit("app", "orders", 0, 3)
	m := c.monitor(lag.Config{Window: 3, Groups: []lag.Group{{Name: "app"}}})
	var statuses []lag.Status
	var lags []int64
	for range 5 {
		c.produce("orders", 0, 2, time.Now())
		r := findRow(t, scan(t, m), "app", "orders", 0)
		statuses = append(statuses, r.Status)
		lags = append(lags, r.Lag)
	}
	wantLags := []int64{2, 4, 6, 8, 10}
	wantStatus := []lag.Status{lag.StatusOK, lag.StatusOK, lag.StatusStop, lag.StatusStop, lag.StatusStop}
	for i := range lags {
		if lags[i] != wantLags[i] || statuses[i] != wantStatus[i] {
			t.Fatalf("lags %v statuses %v, want %v %v", lags, statuses, wantLags, wantStatus)
		}
	}
	if g := m.Latest().Groups[0]; g.State != "Empty" || g.Status != lag.StatusStop {
		t.Errorf("group = %+v", g)
	}
}

// TestLagStall: a live member that holds the partition but does not
// advance is STALL, not STOP.
func TestLagStall(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 1)
	c.produce("orders", 0, 3, time.Now())
	c.commit("app", "orders", 0, 1)
	member, err := kgo.NewClient(kgo.SeedBrokers(c.addrs...), kgo.ConsumerGroup("app"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	deadline := time.Now().Add(10 * time.Second)
	m := c.monitor(lag.Config{Window: 2, Groups: []lag.Group{{Name: "app"}}})
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		member.PollFetches(ctx) // joins the group, never commits
		cancel()
		r := findRow(t, scan(t, m), "app", "orders", 0)
		if r.Assigned && r.Status == lag.StatusStall {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no STALL: %+v", r)
		}
	}
}

// TestRun: Run scans at once and then every interval, and returns soon
// after its context ends.
func TestRun(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 1)
	c.commit("app", "orders", 0, 0)
	m := c.monitor(lag.Config{Interval: 100 * time.Millisecond, Groups: []lag.Group{{Name: "app"}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var times []time.Time
	deadline := time.Now().Add(5 * time.Second)
	for len(times) < 3 && time.Now().Before(deadline) {
		if s := m.Latest(); s != nil && (len(times) == 0 || s.Time.After(times[len(times)-1])) {
			times = append(times, s.Time)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return within 2s of cancel")
	}
	if len(times) < 3 {
		t.Fatalf("%d scans in 5s at a 100ms interval", len(times))
	}
}
