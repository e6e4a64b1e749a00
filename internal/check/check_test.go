package check

import "testing"

func TestConservation(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(l *Ledger)
		want Conservation
		ok   bool
	}{
		{"all acked", func(l *Ledger) { l.Produced("a"); l.Acked("a") }, Conservation{Produced: 1, Delivered: 1}, true},
		{"acked twice is fine", func(l *Ledger) { l.Produced("a"); l.Acked("a"); l.Acked("a") }, Conservation{Produced: 1, Delivered: 1, Redelivered: 1}, true},
		{"dead-lettered", func(l *Ledger) { l.Produced("a"); l.DeadLettered("a") }, Conservation{Produced: 1, DeadLettered: 1}, true},
		{"lost", func(l *Ledger) { l.Produced("a"); l.Produced("b"); l.Acked("b") }, Conservation{Produced: 2, Delivered: 1, Lost: 1, LostIDs: []string{"a"}}, false},
		{"DLQ duplicate", func(l *Ledger) { l.Produced("a"); l.DeadLettered("a"); l.DeadLettered("a") }, Conservation{Produced: 1, DeadLettered: 1, DLQDuplicates: 1}, false},
		{"both", func(l *Ledger) { l.Produced("a"); l.Acked("a"); l.DeadLettered("a") }, Conservation{Produced: 1, Both: 1}, false},
		{"unknown", func(l *Ledger) { l.Acked("x") }, Conservation{Unknown: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger()
			tc.do(l)
			got := l.Check()
			if got.OK() != tc.ok {
				t.Errorf("OK() = %v, want %v (%+v)", got.OK(), tc.ok, got)
			}
			if got.Produced != tc.want.Produced || got.Delivered != tc.want.Delivered || got.DeadLettered != tc.want.DeadLettered ||
				got.Lost != tc.want.Lost || got.Redelivered != tc.want.Redelivered || got.DLQDuplicates != tc.want.DLQDuplicates ||
				got.Both != tc.want.Both || got.Unknown != tc.want.Unknown || len(got.LostIDs) != len(tc.want.LostIDs) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if l.Settled() != (got.Lost == 0) {
				t.Errorf("Settled() = %v with %d lost", l.Settled(), got.Lost)
			}
		})
	}
}

func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		acks  []string
		wantN int
	}{
		{"in order", []string{"a0", "a1", "a2"}, 0},
		{"gap is fine", []string{"a0", "a2"}, 0},
		{"repeat is ignored", []string{"a0", "a1", "a0", "a2"}, 0},
		{"out of order", []string{"a1", "a0", "a2"}, 1},
		{"other key interleaved", []string{"a0", "b1", "a1", "b0"}, 1},
		{"unknown ids ignored", []string{"x", "a0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOrder()
			for _, id := range []string{"a0", "a1", "a2"} {
				o.Produced("a", id)
			}
			for _, id := range []string{"b0", "b1"} {
				o.Produced("b", id)
			}
			for _, id := range tc.acks {
				o.Acked(id)
			}
			if n, ex := o.Violations(); n != tc.wantN {
				t.Errorf("violations %d (%v), want %d", n, ex, tc.wantN)
			}
		})
	}
}
