package lag

import (
	"testing"
	"time"
)

func TestPipelines(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	scan := func(at time.Duration, srcEnd, committed, tierEnd, dlqEnd int64, broken bool) *Snapshot {
		s := &Snapshot{Time: t0.Add(at)}
		for p := range int32(2) { // two partitions, the offsets split between them
			s.Rows = append(s.Rows,
				Row{Group: "g", Topic: "orders", Partition: p, Source: "orders", Stage: StageSource, End: srcEnd / 2, Committed: committed / 2,
					Lag: (srcEnd - committed) / 2, Age: time.Duration(p+1) * time.Second, AgeKnown: true},
				Row{Group: "g", Topic: "orders.retry.1m", Partition: p, Source: "orders", Stage: TierStage(1), End: tierEnd / 2, Committed: -1, Lag: tierEnd / 2, AgeKnown: true},
				Row{Group: "g", Topic: "orders.parking", Partition: p, Source: "orders", Stage: StageParking, End: 1000, Lag: 1000, Age: time.Hour, AgeKnown: true})
			s.DLQ = append(s.DLQ, Row{Topic: "orders.dlq", Partition: p, Source: "orders", Stage: StageDLQ, End: dlqEnd / 2})
		}
		if broken {
			s.Rows[0].Error, s.Rows[0].Lag = "timeout", -1
		}
		// A foreign group: no pipeline.
		s.Rows = append(s.Rows, Row{Group: "app", Topic: "events", End: 10, Lag: 10})
		return s
	}
	for _, tc := range []struct {
		name                           string
		prev, cur                      *Snapshot
		known                          bool
		enqueue, drain, toTiers, toDLQ float64
	}{
		{"one scan", nil, scan(0, 100, 40, 10, 2, false), false, 0, 0, 0, 0},
		{"two scans 2s apart", scan(0, 100, 40, 10, 2, false), scan(2*time.Second, 200, 60, 14, 6, false), true, 50, 10, 2, 2},
		{"nothing moved", scan(0, 100, 40, 10, 2, false), scan(time.Second, 100, 40, 10, 2, false), true, 0, 0, 0, 0},
		{"a partition not measured", scan(0, 100, 40, 10, 2, false), scan(time.Second, 200, 60, 14, 6, true), false, 0, 0, 0, 0},
		{"offsets went back (a recreated topic)", scan(0, 100, 40, 10, 2, false), scan(time.Second, 20, 0, 10, 2, false), false, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := Pipelines(tc.prev, tc.cur)
			if len(ps) != 1 || ps[0].Source != "orders" || ps[0].Group != "g" {
				t.Fatalf("pipelines %+v, want one: g on orders (the foreign group is none)", ps)
			}
			p := ps[0]
			if p.RatesKnown != tc.known || p.Enqueue != tc.enqueue || p.Drain != tc.drain || p.ToTiers != tc.toTiers || p.ToDLQ != tc.toDLQ {
				t.Errorf("got known %v enqueue %v drain %v to tiers %v to DLQ %v; want %v %v %v %v %v",
					p.RatesKnown, p.Enqueue, p.Drain, p.ToTiers, p.ToDLQ, tc.known, tc.enqueue, tc.drain, tc.toTiers, tc.toDLQ)
			}
			if tc.cur.Rows[0].Error == "" && (p.Oldest != 2*time.Second || !p.AgeKnown) {
				t.Errorf("oldest %v (known %v), want 2s: the oldest of source and tiers, parking left out", p.Oldest, p.AgeKnown)
			}
		})
	}
}
