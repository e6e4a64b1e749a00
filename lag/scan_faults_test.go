package lag_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/lag"
)

// TestLagDeletedTopicAndGroup: rows of a deleted topic or group go away; a
// recreated topic starts afresh.
func TestLagDeletedTopicAndGroup(t *testing.T) {
	c := newCluster(t)
	c.createTopic("a", 2)
	c.createTopic("b", 1)
	c.produce("a", 1, 4, time.Now())
	c.produce("b", 0, 4, time.Now())
	c.commit("app", "a", 0, 0)
	c.commit("app", "a", 1, 1)
	c.commit("app", "b", 0, 1)
	c.commit("other", "b", 0, 2)
	m := c.monitor(lag.Config{Groups: []lag.Group{{Name: "app"}, {Name: "other"}}})
	snap := scan(t, m)
	if !hasRow(snap, "app", "a") || !hasRow(snap, "app", "b") || !hasRow(snap, "other", "b") {
		t.Fatalf("rows = %+v", snap.Rows)
	}

	c.deleteTopic("a")
	if _, err := c.adm.DeleteGroup(context.Background(), "other"); err != nil {
		t.Fatal(err)
	}
	snap = scan(t, m)
	if hasRow(snap, "app", "a") || hasRow(snap, "other", "b") || !hasRow(snap, "app", "b") {
		t.Fatalf("after deletes: rows = %+v", snap.Rows)
	}

	// Recreated with one partition and one record: a[1] is gone; whatever
	// commit survives for a[0] is measured against the new log.
	c.createTopic("a", 1)
	c.produce("a", 0, 1, time.Now())
	c.commit("app", "a", 0, 0)
	snap = scan(t, m)
	if r := findRow(t, snap, "app", "a", 0); r.Lag != 1 || r.Error != "" {
		t.Errorf("recreated a[0]: %+v", r)
	}
	for _, r := range snap.Rows {
		if r.Topic == "a" && r.Partition == 1 {
			t.Errorf("a[1] still reported: %+v", r)
		}
	}
}

// TestLagMissingTopicNotCreated: an expected topic that does not exist is
// a scan error, and the scan does not create it on the embedded broker
// (which creates topics on request).
func TestLagMissingTopicNotCreated(t *testing.T) {
	c := newCluster(t)
	m := c.monitor(lag.Config{Groups: []lag.Group{{Name: "g", ReadCommitted: true, Topics: []lag.Topic{{Name: "nope"}}}}})
	snap, scanErr := m.Scan(context.Background())
	if scanErr == nil || !strings.Contains(scanErr.Error(), `topic "nope"`) || len(snap.Errors) != 1 {
		t.Fatalf("err = %v, snapshot errors %q", scanErr, snap.Errors)
	}
	topics, err := c.adm.ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("nope") {
		t.Error("the scan created the topic")
	}
	if strings.Contains(scanErr.Error(), "kretry run creates") {
		t.Errorf("a topic of no stage got the hint of kretry's own topics: %v", scanErr)
	}
	// A missing tier: kretry run creates its tiers, so the error says the
	// config may differ from the running instance's.
	m = c.monitor(lag.Config{Groups: []lag.Group{{Name: "g", ReadCommitted: true, Topics: []lag.Topic{{Name: "nope.retry.5s", Source: "nope", Stage: lag.TierStage(1)}}}}})
	if _, err = m.Scan(context.Background()); err == nil || !strings.Contains(err.Error(), "does the config differ from the running instance's") {
		t.Errorf("missing tier: err = %v, want the hint", err)
	}
}

// TestLagBrokerDown: when the broker is gone the scan ends within its
// timeouts and reports every known partition ERR, never a stale value; when
// it returns, the next scans recover the true lag.
func TestLagBrokerDown(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders", 2)
	c.produce("orders", 0, 5, time.Now())
	c.commit("app", "orders", 0, 2)
	m := c.monitor(lag.Config{Timeout: 300 * time.Millisecond, Groups: []lag.Group{{Name: "app", Topics: []lag.Topic{{Name: "orders"}}}}})
	if r := findRow(t, scan(t, m), "app", "orders", 0); r.Lag != 3 {
		t.Fatalf("before the stop: lag %d, want 3", r.Lag)
	}
	listen := c.addrs[0]
	c.stopBroker()
	start := time.Now()
	snap, err := m.Scan(context.Background())
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("scan took %v with a 300ms timeout", took)
	}
	if err == nil {
		t.Fatal("no error with the broker down")
	}
	if len(snap.Rows) != 2 {
		t.Fatalf("rows = %+v", snap.Rows)
	}
	for _, r := range snap.Rows {
		if r.Status != lag.StatusErr || r.Error == "" || r.Lag != -1 {
			t.Errorf("row %+v, want ERR", r)
		}
	}

	c.startBroker(listen)
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, err := m.Scan(context.Background())
		if err == nil {
			if r := findRow(t, snap, "app", "orders", 0); r.Status != lag.StatusErr && r.Lag == 3 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery 30s after the broker returned: %v %+v", err, snap.Rows)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestLagDLQ: records wait in a DLQ from its log start, or from the DLQ
// group's commit.
func TestLagDLQ(t *testing.T) {
	c := newCluster(t)
	c.createTopic("orders.dlq", 2)
	old := time.Now().Add(-2 * time.Hour).Truncate(time.Millisecond)
	yes := true
	c.produceTxn("orders.dlq", 0, 3, old, &yes)
	c.produceTxn("orders.dlq", 1, 2, old.Add(time.Hour), &yes)
	clock := &fixedClock{t: time.Now()}
	cfg := lag.Config{DLQs: []lag.DLQ{{Topic: "orders.dlq", Source: "orders"}}}
	snap := scan(t, c.monitor(cfg, lag.WithClock(clock.now)))
	st := snap.Stages()
	// 3 + 2 records, and one commit marker per partition: offsets count.
	if len(st) != 1 || st[0].Stage != lag.StageDLQ || st[0].Records != 7 || st[0].Age != clock.t.Sub(old) {
		t.Fatalf("stages = %+v", st)
	}

	c.commit("replay", "orders.dlq", 0, 4) // past the 3 records and the marker
	cfg.DLQGroup = "replay"
	snap = scan(t, c.monitor(cfg, lag.WithClock(clock.now)))
	st = snap.Stages()
	if len(st) != 1 || st[0].Records != 3 || st[0].Age != clock.t.Sub(old.Add(time.Hour)) {
		t.Fatalf("stages with a DLQ group = %+v", st)
	}
}
