package overload

import "testing"

// TestExhaustedBeforeAnySuccessOpens (breaker pass, issue 11): a gate that
// has seen no success yet (a process restarted during an outage) opens at
// the first transient failure that would dead-letter its record, and
// holds it; once a delivery succeeded, the same failure counts (poison on
// its last tier is dead-lettered at once, as before).
func TestExhaustedBeforeAnySuccessOpens(t *testing.T) {
	last := fail("k1")
	last.Last = true
	g, _ := newTestGate(t, Config{Breaker: breakerConfig()})
	if v := deliver(t, g, t0, true, last); v != Hold {
		t.Errorf("first outcome an exhausting failure: verdict %v, want Hold (%d)", v, Hold)
	}
	if s := g.Snapshot(t0); s.State != Open || s.Opened[ReasonDependency] != 1 {
		t.Errorf("gate %+v, want open once for the dependency", s)
	}

	g, _ = newTestGate(t, Config{Breaker: breakerConfig()})
	if v := deliver(t, g, t0, false, success("k0")); v != Count {
		t.Fatalf("success: verdict %v", v)
	}
	if v := deliver(t, g, t0, true, last); v != Count {
		t.Errorf("an exhausting failure after a success: verdict %v, want Count (%d): poison is dead-lettered at once", v, Count)
	}
	if s := g.Snapshot(t0); s.State != Closed {
		t.Errorf("gate %+v, want closed", s)
	}
}
