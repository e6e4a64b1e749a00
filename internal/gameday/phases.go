package gameday

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// Phase names, in the order they run.
const (
	PhaseSteady  = "steady"
	PhaseSpike   = "spike"
	PhaseSlow    = "slow"
	PhaseFailing = "failing"
	PhasePoison  = "poison"
	PhaseBurst   = "burst"
	PhaseDrain   = "drain"
)

// span is one phase: what was injected from Start to Inject, and the wait
// for the queue to drain until End.
type span struct {
	Name   string    `json:"name"`
	Start  time.Time `json:"start"`
	Inject time.Time `json:"inject_end"`
	End    time.Time `json:"end"`
	// Settled: the queue drained (lag 0, every record done) before End;
	// false when the wait ran out (Plan.Settle).
	Settled bool `json:"settled"`
}

// phases runs the schedule of a Plan against one peer.
type phases struct {
	ctx      context.Context
	e        *env
	load     *load
	smp      *sampler
	dlq      *dlqReader
	progress io.Writer
	peer     string

	spans  []span
	poison int64
	burst  []int64
}

func (ph *phases) run() {
	p, dep := ph.e.plan, ph.e.app.dep
	ph.load.setRate(p.SteadyRate)
	ph.phase(PhaseSteady, func() { ph.sleep(p.SteadyFor) }, false)
	ph.phase(PhaseSpike, func() {
		ph.load.setRate(p.SpikeRate)
		ph.sleep(p.SpikeFor)
		ph.load.setRate(p.SteadyRate)
	}, true)
	ph.phase(PhaseSlow, func() {
		dep.service.Store(int64(p.SlowServiceTime))
		ph.sleep(p.SlowFor)
	}, false)
	ph.phase(PhaseFailing, func() {
		dep.failing.Store(true)
		ph.sleep(p.FailFor)
		dep.failing.Store(false)
		dep.service.Store(int64(p.ServiceTime))
	}, true)
	ph.phase(PhasePoison, ph.injectPoison, true)
	ph.phase(PhaseBurst, func() {
		dep.failing.Store(true)
		ph.burst = ph.load.burst(ph.ctx, kindBurst, p.Burst)
		ph.sleep(p.BlipFor)
		dep.failing.Store(false)
	}, true)
	ph.phase(PhaseDrain, func() { ph.load.setRate(0) }, true)
}

// injectPoison writes the poison record and waits, at most Settle, until
// the DLQ reader has read it: the poison phase's injection is the poison
// record's whole way through the tiers. The settle that follows then waits
// for every record produced until then (healthy_keys_p99 measures them) to
// be acknowledged, so that the next phase's blip of the dependency cannot
// fail one of them and charge its retry to the poison record.
func (ph *phases) injectPoison() {
	ph.poison = ph.load.one(ph.ctx, kindPoison)
	deadline := time.Now().Add(ph.e.plan.Settle)
	for !ph.dlq.has(ph.poison) && time.Now().Before(deadline) && ph.ctx.Err() == nil {
		ph.sleep(10 * time.Millisecond)
	}
}

// phase runs inject, then (when settle) waits until the queue has drained:
// every record produced so far acknowledged or dead-lettered, and a lag
// scan taken after that showing 0.
func (ph *phases) phase(name string, inject func(), settle bool) {
	if ph.ctx.Err() != nil {
		return
	}
	s := span{Name: name, Start: time.Now()}
	inject()
	s.Inject = time.Now()
	s.Settled = true
	if settle {
		d := ph.e.plan.Settle
		if name == PhaseDrain {
			d = ph.e.plan.DrainSettle
		}
		s.Settled = ph.waitDrained(ph.load.next.Load(), d)
	}
	s.End = time.Now()
	ph.spans = append(ph.spans, s)
	if ph.progress != nil {
		last, _ := ph.smp.latest()
		fmt.Fprintf(ph.progress, "%-8s %-8s %5.1fs  lag %d  dead-lettered %d%s\n", ph.peer, name,
			s.End.Sub(s.Start).Seconds(), last.LagTotal, ph.dlq.count(), map[bool]string{false: "  (did not drain)"}[s.Settled])
	}
}

func (ph *phases) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-ph.ctx.Done():
	}
}

// caughtUp is how old the oldest outstanding record may be for the queue
// to count as caught up under the steady load (some records are always in
// flight). It is below the first tier's delay (quick: 250ms), so a phase
// does not end while a record waits for a retry, in a tier or parked
// behind its key's record there, nor while the queue still drains a
// backlog: the next phase would start on it, and healthy_keys_p99 measured
// the previous phase. It is above the oldest outstanding record of the
// steady state (measured on the embedded broker, 2 shared cores: 10-20ms
// at the 90th percentile of 50ms polls, 147ms in one stall of the whole
// process). With 500ms, the poison phase of one run started with 43
// records of the outage's backlog outstanding, the oldest 491ms old, and
// its first records waited up to 248ms, behind them and a 130ms stall of
// the process (p99 154ms); 3 runs with 100ms started it with 1-8
// outstanding, the oldest 5-49ms old.
const caughtUp = 100 * time.Millisecond

// waitDrained waits up to d for the queue to catch up: every record up to
// id last written and done, and none older than caughtUp outstanding (the
// app's and the DLQ's view: this paces the phases; the checks read the lag
// from the brokers).
func (ph *phases) waitDrained(last int64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ph.ctx.Err() == nil {
		if ph.allDone(last, time.Now().Add(-caughtUp)) {
			return true
		}
		ph.sleep(50 * time.Millisecond)
	}
	return false
}

// allDone: every record up to id last was written, and every record
// written up to id last or before cutoff was acknowledged by the app or
// read from the DLQ.
func (ph *phases) allDone(last int64, cutoff time.Time) bool {
	dead := map[int64]bool{}
	for _, d := range ph.dlq.all() {
		dead[d.ID] = true
	}
	produced := ph.load.records()
	for id := int64(1); id <= last; id++ {
		if _, ok := produced[id]; !ok {
			return false
		}
	}
	for id, o := range produced {
		if (id <= last || time.Unix(0, o.Produced).Before(cutoff)) && !dead[id] && !ph.e.app.acked(id) {
			return false
		}
	}
	return true
}

// spanOf returns the phase named name.
func spanOf(spans []span, name string) (span, bool) {
	i := slices.IndexFunc(spans, func(s span) bool { return s.Name == name })
	if i < 0 {
		return span{}, false
	}
	return spans[i], true
}
