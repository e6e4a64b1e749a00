package gameday

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// TestRetrySpread: retries that wait out the same delay and arrive
// together fail the check however short the wave; retries spread over the
// wait pass.
func TestRetrySpread(t *testing.T) {
	wave := func(delay, width int) []arrival {
		var a []arrival
		for i := range 300 {
			a = append(a, arrival{ID: int64(i), At: at(i % 20), Seen: 1})
			a = append(a, arrival{ID: int64(i), At: at(delay + i*width/300), Seen: 2})
		}
		return a
	}
	for _, tc := range []struct {
		name string
		arr  []arrival
		pass bool
	}{
		{"synchronised wave: 250ms wait, all within 50ms", wave(250, 50), false},
		{"jitter 0.2 of a 1s tier", wave(1000, 200), false},
		{"full jitter over the wait", wave(0, 1000), true},
		{"paced by a budget over 3s after a 250ms wait", wave(250, 3000), true},
		{"a handful retried, the rest held back", wave(250, 50)[:2*20], true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Quick()
			ids := make([]int64, 300)
			for i := range ids {
				ids[i] = int64(i)
			}
			r := &run{plan: &p, arrivals: tc.arr, burst: ids}
			if c := r.retrySpread(); c.Pass != tc.pass {
				t.Errorf("pass %v, want %v: %v (%s)", c.Pass, tc.pass, c.Value, c.Detail)
			}
		})
	}
}

// TestLagRecovers: recovered once the backlog of the moment is consumed
// and the lag is back at its steady level; not while a partition is still
// behind its end offset of then, nor while the lag stays high.
func TestLagRecovers(t *testing.T) {
	p := Quick()
	p.SteadyRate = 10 // steady level: the steady phase's largest lag, at least 5
	part := func(committed, end, lag int64) map[string]partPos {
		return map[string]partPos{"orders/0": {Committed: committed, End: end, Lag: lag}}
	}
	spans := []span{{Name: PhaseSteady, Start: at(0), End: at(3000)},
		{Name: PhaseFailing, Start: at(3000), Inject: at(7000), End: at(20000)}}
	for _, tc := range []struct {
		name    string
		samples []sample
		want    float64
	}{
		{"backlog consumed 2s after the return", []sample{
			{At: at(1500), LagTotal: 4, ScanOK: true, Parts: part(0, 4, 4)},
			{At: at(7000), LagTotal: 500, ScanOK: true, Parts: part(100, 600, 500)},
			{At: at(8000), LagTotal: 200, ScanOK: true, Parts: part(450, 650, 200)},
			{At: at(9000), LagTotal: 3, ScanOK: true, Parts: part(700, 703, 3)}}, 2},
		{"lag low but the old backlog not passed (records waiting elsewhere)", []sample{
			{At: at(7000), LagTotal: 500, ScanOK: true, Parts: part(100, 600, 500)},
			{At: at(9000), LagTotal: 3, ScanOK: true, Parts: part(590, 593, 3)}}, -1},
		{"backlog passed but the lag stays high", []sample{
			{At: at(7000), LagTotal: 500, ScanOK: true, Parts: part(100, 600, 500)},
			{At: at(9000), LagTotal: 400, ScanOK: true, Parts: part(700, 1100, 400)}}, -1},
		{"an incomplete scan does not count", []sample{
			{At: at(7000), LagTotal: 500, ScanOK: true, Parts: part(100, 600, 500)},
			{At: at(8000), LagTotal: 0, ScanOK: false, Parts: part(700, 700, 0)},
			{At: at(9500), LagTotal: 0, ScanOK: true, Parts: part(700, 700, 0)}}, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{plan: &p, spans: spans, samples: tc.samples}
			c := r.lagRecovers(PhaseFailing, "outage_drained", "the dependency returns")
			if c.Value != tc.want || c.Pass != (tc.want >= 0 && tc.want <= p.RecoverWithin.Seconds()) {
				t.Errorf("value %v pass %v, want %v (%s)", c.Value, c.Pass, tc.want, c.Detail)
			}
		})
	}
}

// TestRetryBudget: a window of retries above 20% of deliveries + 10/s
// fails; the same retries spread under the budget pass.
func TestRetryBudget(t *testing.T) {
	p := Quick() // 2s windows
	mk := func(retriesPerSample float64) []sample {
		var s []sample
		var del, ret float64
		for i := range 50 { // 5s, every 100ms, 100 deliveries/s
			del += 10
			ret += retriesPerSample
			s = append(s, sample{At: at(i * 100), Metrics: true, Deliveries: del, Retries: ret})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		rate float64 // retries per 100ms
		pass bool
	}{
		{"retries 75% of deliveries", 7.5, false},
		{"retries 25/s of 100/s: under 20% + 10/s", 2.5, true},
	} {
		r := &run{plan: &p, samples: mk(tc.rate)}
		if c := r.retryBudget(); c.Pass != tc.pass {
			t.Errorf("%s: pass %v, want %v: %v (%s)", tc.name, c.Pass, tc.pass, c.Value, c.Detail)
		}
	}
}

// TestSourcePaused: the source's committed offset advancing during the
// outage (records walked into the tiers) fails; standing still passes.
func TestSourcePaused(t *testing.T) {
	p := Quick()
	spans := []span{{Name: PhaseFailing, Start: at(0), Inject: at(4000), End: at(6000)}}
	for _, tc := range []struct {
		name      string
		committed [2]int64
		pass      bool
	}{{"paused", [2]int64{100, 104}, true}, {"walked into the tiers", [2]int64{100, 550}, false}} {
		r := &run{plan: &p, spans: spans, samples: []sample{
			{At: at(1000), ScanOK: true, SourceCommitted: tc.committed[0]},
			{At: at(3900), ScanOK: true, SourceCommitted: tc.committed[1]}}}
		if c := r.sourcePaused(); c.Pass != tc.pass {
			t.Errorf("%s: pass %v, want %v (%s)", tc.name, c.Pass, tc.pass, c.Detail)
		}
	}
}

// TestHealthyKeysP99: the check measures the steady records produced while
// the poison record was retried (the poison phase's injection, until the
// DLQ reader read it), from their produce time to the app's first 2xx. A
// record produced after that, still in flight when the next phase's blip
// fails it, is not the poison's doing and does not count; records held
// behind the poison, or never acknowledged, fail it.
func TestHealthyKeysP99(t *testing.T) {
	spans := []span{{Name: PhasePoison, Start: at(0), Inject: at(2000), End: at(2100)}, {Name: PhaseBurst, Start: at(2100)}}
	// 300 steady records every 7ms over the phase (the last ones after
	// the poison was dead-lettered), each answered 15ms after it was
	// produced; slow(ids, ms) answers those ids ms after instead.
	mk := func(edit func(produced map[int64]order, arr []arrival) []arrival) (map[int64]order, []arrival) {
		produced := map[int64]order{}
		var arr []arrival
		for i := range 300 {
			id := int64(i + 1)
			produced[id] = order{ID: id, Kind: kindSteady, Produced: at(i * 7).UnixNano()}
			arr = append(arr, arrival{ID: id, Kind: kindSteady, Status: 204, Done: at(i*7 + 15)})
		}
		arr = edit(produced, arr)
		for i := range arr {
			arr[i].E2E = arr[i].Done.Sub(time.Unix(0, produced[arr[i].ID].Produced))
		}
		return produced, arr
	}
	slow := func(from, n, after int) func(map[int64]order, []arrival) []arrival {
		return func(produced map[int64]order, arr []arrival) []arrival {
			for i := from; i < from+n; i++ {
				arr[i].Done = time.Unix(0, produced[arr[i].ID].Produced).Add(time.Duration(after) * time.Millisecond)
			}
			return arr
		}
	}
	for _, tc := range []struct {
		name string
		edit func(map[int64]order, []arrival) []arrival
		pass bool
	}{
		{"all fast", slow(0, 0, 0), true},
		{"the last 5, produced after the poison was dead-lettered, failed by the burst's blip", slow(295, 5, 1400), true},
		{"5 held 1.4s while the poison was retried", slow(140, 5, 1400), false},
		{"one of the window never acknowledged", func(_ map[int64]order, arr []arrival) []arrival { return append(arr[:100], arr[101:]...) }, false},
		{"a duplicate 2xx after an aborted transaction counts from the first", func(_ map[int64]order, arr []arrival) []arrival {
			for i := range 5 {
				d := arr[100+i]
				d.Done = d.Done.Add(1400 * time.Millisecond)
				arr = append(arr, d)
			}
			return arr
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Quick()
			produced, arr := mk(tc.edit)
			r := &run{plan: &p, spans: spans, produced: produced, arrivals: arr}
			if c := r.healthyP99(); c.Pass != tc.pass {
				t.Errorf("pass %v, want %v: %v ms (%s)", c.Pass, tc.pass, c.Value, c.Detail)
			}
		})
	}
}

// TestPhaseStatsHealthyLatency: a phase's healthy latencies are those of
// the steady records produced in it, from produce to the first 2xx; a
// record of another kind or another phase, or a later duplicate, is not in
// them.
func TestPhaseStatsHealthyLatency(t *testing.T) {
	p := Quick()
	s := span{Name: PhaseSteady, Start: at(0), End: at(1000)}
	produced := map[int64]order{}
	var arr []arrival
	for i := range 100 { // record i answered i+1 ms after it was produced
		id := int64(i + 1)
		produced[id] = order{ID: id, Kind: kindSteady, Produced: at(i * 10).UnixNano()}
		arr = append(arr, arrival{ID: id, Status: 204, Done: at(i*10 + i + 1)})
	}
	produced[101] = order{ID: 101, Kind: kindPoison, Produced: at(10).UnixNano()}
	produced[102] = order{ID: 102, Kind: kindSteady, Produced: at(1001).UnixNano()}
	arr = append(arr, arrival{ID: 50, Status: 204, Done: at(5000)}, arrival{ID: 101, Status: 204, Done: at(5000)},
		arrival{ID: 102, Status: 204, Done: at(5000)}, arrival{ID: 7, Status: 503, Done: at(1)})
	r := &run{plan: &p, spans: []span{s}, produced: produced, arrivals: arr}
	ps := r.phaseStats(s)
	if ps.HealthyP50MS != 50 || ps.HealthyP99MS != 99 || ps.HealthyMaxMS != 100 {
		t.Errorf("healthy latency p50 %v, p99 %v, max %v ms; want 50, 99, 100", ps.HealthyP50MS, ps.HealthyP99MS, ps.HealthyMaxMS)
	}
}

// TestCountList: counts read as words, in the order given, not as Go maps.
func TestCountList(t *testing.T) {
	got := countList(map[string]int{"burst": 2, "failing": 8, "zzz": 1, "aaa": 3}, []string{PhaseFailing, PhasePoison, PhaseBurst})
	if want := "failing 8, burst 2, aaa 3, zzz 1"; got != want {
		t.Errorf("countList = %q, want %q", got, want)
	}
}
