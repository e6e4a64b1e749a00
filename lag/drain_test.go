package lag_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/kretry/kretry/lag"
)

func TestDrainRate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := func(sec int, committed int64) lag.Sample {
		return lag.Sample{Time: t0.Add(time.Duration(sec) * time.Second), Committed: committed}
	}
	for _, tc := range []struct {
		name    string
		samples []lag.Sample
		rate    float64
		ok      bool
	}{
		{"no samples", nil, 0, false},
		{"one sample", []lag.Sample{s(0, 10)}, 0, false},
		{"100 records in 10s", []lag.Sample{s(0, 0), s(5, 40), s(10, 100)}, 10, true},
		{"standing still", []lag.Sample{s(0, 50), s(30, 50)}, 0, true},
		{"first commit inside the window", []lag.Sample{s(0, -1), s(10, 0), s(20, 50)}, 5, true},
		{"no commit yet", []lag.Sample{s(0, -1), s(10, -1)}, 0, false},
		{"an error in the latest", []lag.Sample{s(0, 0), {Time: t0.Add(time.Second), Err: true}}, 0, false},
		{"an error earlier is skipped", []lag.Sample{{Time: t0, Err: true}, s(10, 0), s(20, 30)}, 3, true},
		{"a reset (commit went back)", []lag.Sample{s(0, 100), s(10, 5)}, 0, false},
		{"no time between", []lag.Sample{s(0, 1), s(0, 5)}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate, ok := lag.DrainRate(tc.samples)
			if ok != tc.ok || rate != tc.rate {
				t.Errorf("DrainRate = %v, %v; want %v, %v", rate, ok, tc.rate, tc.ok)
			}
		})
	}
}

func TestTimeToDrain(t *testing.T) {
	for _, tc := range []struct {
		lag  int64
		rate float64
		want float64
	}{
		{0, 0, 0},
		{0, 10, 0},
		{100, 10, 10},
		{5, 0.5, 10},
		{100, 0, math.Inf(1)},
	} {
		if got := lag.TimeToDrain(tc.lag, tc.rate); got != tc.want {
			t.Errorf("TimeToDrain(%d, %v) = %v, want %v", tc.lag, tc.rate, got, tc.want)
		}
	}
}

// TestScanTimeToDrain: a group consuming 10 records/s of a backlog drains
// it in lag/10 s; a group that stopped has +Inf; a caught-up one 0; a
// first scan knows no rate. Both export modes, and the JSON of the rows.
func TestScanTimeToDrain(t *testing.T) {
	for _, perPartition := range []bool{true, false} {
		t.Run(map[bool]string{true: "per partition", false: "per topic"}[perPartition], func(t *testing.T) {
			c := newCluster(t)
			c.createTopic("events", 1)
			c.createTopic("idle", 1)
			c.produce("events", 0, 300, time.Now())
			c.produce("idle", 0, 5, time.Now())
			c.commit("moving", "events", 0, 0)
			c.commit("stopped", "events", 0, 100)
			c.commit("caughtup", "idle", 0, 5)

			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			clock := &fixedClock{t: time.Now()}
			m := c.monitor(lag.Config{PerPartition: perPartition, Window: 3,
				Groups: []lag.Group{{Name: "moving"}, {Name: "stopped"}, {Name: "caughtup"}}},
				lag.WithMeterProvider(mp), lag.WithClock(clock.now))

			first := scan(t, m)
			if r := findRow(t, first, "moving", "events", 0); r.DrainRateKnown || r.TimeToDrainKnown {
				t.Errorf("first scan: drain rate %v (known %v), time to drain %v (known %v); want both unknown", r.DrainRate, r.DrainRateKnown, r.TimeToDrain, r.TimeToDrainKnown)
			}
			if r := findRow(t, first, "caughtup", "idle", 0); !r.TimeToDrainKnown || r.TimeToDrain != 0 {
				t.Errorf("caught up: time to drain %v (known %v), want 0", r.TimeToDrain, r.TimeToDrainKnown)
			}
			for _, at := range []int64{100, 200} {
				clock.t = clock.t.Add(10 * time.Second)
				c.commit("moving", "events", 0, at)
				scan(t, m)
			}
			snap := m.Latest()
			moving := findRow(t, snap, "moving", "events", 0)
			if !moving.DrainRateKnown || moving.DrainRate != 10 || moving.Lag != 100 || moving.TimeToDrain != 10 {
				t.Errorf("moving: lag %d, drain rate %v (known %v), time to drain %v; want 100, 10/s, 10s", moving.Lag, moving.DrainRate, moving.DrainRateKnown, moving.TimeToDrain)
			}
			stopped := findRow(t, snap, "stopped", "events", 0)
			if !stopped.DrainRateKnown || stopped.DrainRate != 0 || !math.IsInf(stopped.TimeToDrain, 1) {
				t.Errorf("stopped: drain rate %v (known %v), time to drain %v; want 0 and +Inf", stopped.DrainRate, stopped.DrainRateKnown, stopped.TimeToDrain)
			}

			got := points(t, reader)
			suffix := ",messaging.destination.partition.id=0}"
			if !perPartition {
				suffix = "}"
			}
			for k, v := range map[string]float64{
				"kretry.lag.time_to_drain{messaging.consumer.group.name=moving,messaging.destination.name=events" + suffix:    10,
				"kretry.consumer.drain.rate{messaging.consumer.group.name=moving,messaging.destination.name=events" + suffix:  10,
				"kretry.lag.time_to_drain{messaging.consumer.group.name=stopped,messaging.destination.name=events" + suffix:   math.Inf(1),
				"kretry.consumer.drain.rate{messaging.consumer.group.name=stopped,messaging.destination.name=events" + suffix: 0,
				"kretry.lag.time_to_drain{messaging.consumer.group.name=caughtup,messaging.destination.name=idle" + suffix:    0,
			} {
				if g, ok := got[k]; !ok || g != v {
					t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
				}
			}

			b, err := json.Marshal(snap)
			if err != nil {
				t.Fatalf("JSON of a snapshot holding +Inf: %v", err)
			}
			js := string(b)
			if !strings.Contains(js, `"drain_rate":10,"time_to_drain_seconds":10`) || !strings.Contains(js, `"drain_rate":0,`) {
				t.Errorf("JSON lacks the drain fields: %s", js)
			}
		})
	}
}
