package flow

import (
	"testing"
	"time"
)

func TestStageTier(t *testing.T) {
	for _, tt := range []struct {
		s    Stage
		tier int
		ok   bool
	}{
		{TierStage(1), 1, true},
		{TierStage(12), 12, true},
		{StageSource, 0, false},
		{StageParking, 0, false},
		{StageDLQ, 0, false},
		{"tier-0", 0, false},
		{"tier-x", 0, false},
	} {
		if tier, ok := tt.s.Tier(); tier != tt.tier || ok != tt.ok {
			t.Errorf("%q.Tier() = %d, %v; want %d, %v", tt.s, tier, ok, tt.tier, tt.ok)
		}
	}
	if TierStage(3) != "tier-3" {
		t.Errorf("TierStage(3) = %q", TierStage(3))
	}
}

func TestOrderingParks(t *testing.T) {
	want := map[Ordering]bool{OrderingKey: true, OrderingPartition: true, OrderingNone: false, "": false}
	for o, w := range want {
		if o.Parks() != w {
			t.Errorf("%q.Parks() = %v, want %v", o, o.Parks(), w)
		}
	}
	if DefaultOrdering != OrderingKey {
		t.Errorf("DefaultOrdering %q, want key (DESIGN.md: ordering key by default)", DefaultOrdering)
	}
}

func TestFormats(t *testing.T) {
	if got := RecordID("orders", 2, 42); got != "orders/2/42" {
		t.Errorf("RecordID = %q", got)
	}
	if got := TransactionalID("kretry", "pod-0", "orders-kretry"); got != "kretry-pod-0-orders-kretry" {
		t.Errorf("TransactionalID = %q", got)
	}
	if DefaultMaxInFlight != 64 || DefaultDeliveryTimeout != 10*time.Second {
		t.Errorf("defaults %d, %s; want 64, 10s (README, Configuration)", DefaultMaxInFlight, DefaultDeliveryTimeout)
	}
	// Fresh slices: a caller may change its copy.
	p := DefaultPermanent()
	p[0] = 0
	if DefaultPermanent()[0] != 400 {
		t.Error("DefaultPermanent shares its slice")
	}
}
