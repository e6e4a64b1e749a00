package gameday

import (
	"fmt"
	"time"
)

// Check groups: the seeds' "the queue slows, isolates, and recovers".
const (
	Slows    = "slows"
	Isolates = "isolates"
	Recovers = "recovers"
)

// Check is one verdict of a run, with the figure it was judged on.
type Check struct {
	Group string `json:"group"`
	Name  string `json:"name"`
	// What the check asks, with its limit, in words.
	What string `json:"what"`
	// Value was measured against Limit (Pass: Value ≤ Limit), in Unit.
	Value  float64 `json:"value"`
	Limit  float64 `json:"limit"`
	Unit   string  `json:"unit"`
	Pass   bool    `json:"pass"`
	Detail string  `json:"detail"`
}

func atMost(group, name, what string, v, limit float64, unit, detail string) Check {
	return Check{Group: group, Name: name, What: what, Value: v, Limit: limit, Unit: unit, Pass: v <= limit, Detail: detail}
}

// run is everything one peer's run produced, for the checks.
type run struct {
	peer     string
	plan     *Plan
	spans    []span
	samples  []sample
	arrivals []arrival
	dead     []deadLetter
	produced map[int64]order
	poison   int64
	burst    []int64
	acks     map[int64]time.Time // firstAcks of arrivals, made on first use
}

func (r *run) checks() []Check {
	return []Check{r.sourcePaused(), r.noOutageDLQ(), r.retryBudget(),
		r.poisonIsolated(), r.healthyP99(),
		r.lagRecovers(PhaseSpike, "spike_drained", "the spike ends"),
		r.lagRecovers(PhaseFailing, "outage_drained", "the dependency returns"),
		r.retrySpread(), r.nothingLost()}
}

// sourcePaused: while the dependency fails (after OpenWithin), the
// source's committed offset stands still: records stay where they are.
func (r *run) sourcePaused() Check {
	what := fmt.Sprintf("records taken off the source while the dependency failed, after its first %v (source paused) ≤ %d", r.plan.OpenWithin, r.plan.PausedSlack)
	f, ok := spanOf(r.spans, PhaseFailing)
	a, ok1 := sampleAt(r.samples, f.Start.Add(r.plan.OpenWithin))
	b, ok2 := sampleBefore(r.samples, f.Inject)
	if !ok || !ok1 || !ok2 || !b.At.After(a.At) {
		return Check{Group: Slows, Name: "source_paused", What: what, Unit: "records", Detail: "no lag scans inside the outage"}
	}
	moved := float64(b.SourceCommitted - a.SourceCommitted)
	return atMost(Slows, "source_paused", what, moved, float64(r.plan.PausedSlack), "records",
		fmt.Sprintf("the source's committed offset advanced by %.0f over %.1fs of outage; lag went %d → %d", moved, b.At.Sub(a.At).Seconds(), a.LagTotal, b.LagTotal))
}

// noOutageDLQ: nothing but the poison record is dead-lettered: not by the
// spike, the slow or failing dependency, nor the synchronised failure.
func (r *run) noOutageDLQ() Check {
	n, byPhase := 0, map[string]int{}
	for _, d := range r.dead {
		if d.ID == r.poison {
			continue
		}
		n++
		byPhase[r.phaseAt(d.At)]++
	}
	detail := "only the poison record is in the DLQ"
	if n > 0 {
		var phases []string
		for _, s := range r.spans {
			phases = append(phases, s.Name)
		}
		detail = "dead-lettered by phase (when read): " + countList(byPhase, phases)
	}
	return atMost(Slows, "no_outage_dead_letters", "records dead-lettered other than the poison record = 0", float64(n), 0, "records", detail)
}

func (r *run) phaseAt(t time.Time) string {
	for _, s := range r.spans {
		if !t.Before(s.Start) && !t.After(s.End) {
			return s.Name
		}
	}
	return "after"
}

// retryBudget: over every window of BudgetWindow, retries ≤ BudgetRatio
// × deliveries + BudgetPerSecond × window. kretry's figures come from its
// /metrics (deliveries from a retry tier); the blocking peer has none, so
// its redeliveries are counted at the app.
func (r *run) retryBudget() Check {
	p := r.plan
	what := fmt.Sprintf("retries over any %v ≤ %.0f%% of deliveries + %.0f/s (retry budget)", p.BudgetWindow, 100*p.BudgetRatio, p.BudgetPerSecond)
	type pt struct {
		at       time.Time
		del, ret float64
	}
	var pts []pt
	src := "kretry's /metrics (kretry_deliveries_total, stage tier-N)"
	for _, s := range r.samples {
		if s.Metrics {
			pts = append(pts, pt{s.At, s.Deliveries, s.Retries})
		}
	}
	if len(pts) == 0 {
		src = "redeliveries at the app"
		for _, s := range r.samples {
			var d, rt float64
			for _, a := range r.arrivals {
				if !a.At.After(s.At) {
					d++
					if a.Seen > 1 {
						rt++
					}
				}
			}
			pts = append(pts, pt{s.At, d, rt})
		}
	}
	// The window most over budget; when none is, the one with the
	// largest retry share.
	type window struct{ over, share, ret, del float64 }
	var worst window
	j := 0
	for i := range pts {
		for j < i && pts[i].at.Sub(pts[j].at) > p.BudgetWindow {
			j++
		}
		w := window{del: pts[i].del - pts[j].del, ret: pts[i].ret - pts[j].ret}
		w.over = w.ret - (p.BudgetRatio*w.del + p.BudgetPerSecond*pts[i].at.Sub(pts[j].at).Seconds())
		if w.del > 0 {
			w.share = w.ret / w.del
		}
		if w.over > worst.over || (worst.over <= 0 && w.share > worst.share) {
			worst = w
		}
	}
	worstRet, worstDel, worstShare := worst.ret, worst.del, worst.share
	over := max(worst.over, 0)
	return atMost(Slows, "retries_within_budget", what, over, 0, "retries over budget",
		fmt.Sprintf("worst window: %.0f retries of %.0f deliveries (%.0f%%); from %s", worstRet, worstDel, 100*worstShare, src))
}

// poisonIsolated: the poison record reaches the DLQ after at most
// len(Tiers)+1 attempts: kretry's count (kretry-attempt on the DLQ
// record), or, for a peer that writes none, the deliveries the app saw.
// The app may see more than kretry counts: a delivery whose transaction
// aborted is made again (at least once), with the same attempt.
func (r *run) poisonIsolated() Check {
	limit := float64(len(r.plan.Tiers) + 1)
	what := fmt.Sprintf("the poison record is in the DLQ after ≤ %.0f attempts", limit)
	n := 0
	for _, a := range r.arrivals {
		if a.ID == r.poison {
			n++
		}
	}
	for _, d := range r.dead {
		if d.ID != r.poison {
			continue
		}
		took := d.At.Sub(time.Unix(0, r.produced[r.poison].Produced))
		attempts := n
		detail := fmt.Sprintf("in the DLQ %.1fs after it was produced; the app saw %d deliveries", took.Seconds(), n)
		if d.Attempt > 0 {
			attempts = d.Attempt
			detail += fmt.Sprintf("; class %s, kretry-attempt %d, status %s", d.Class, d.Attempt, d.Status)
		}
		return atMost(Isolates, "poison_dead_lettered", what, float64(attempts), limit, "attempts", detail)
	}
	return Check{Group: Isolates, Name: "poison_dead_lettered", What: what, Value: float64(n), Limit: limit, Unit: "attempts",
		Detail: fmt.Sprintf("not in the DLQ by the end of the run (%d deliveries)", n)}
}

// healthyP99: the steady records produced while the poison record was
// retried keep a bounded end-to-end latency. The window is the poison
// phase's injection: from the phase's start (the poison record is written
// then) until the DLQ reader read the poison record. A record's latency is
// from its produce time (the load's clock, in its value) to the app's first
// 2xx answer (the same clock). The phase settles until every record of the
// window was acknowledged, so none of them meets the burst's blip that
// follows; a record of the window never acknowledged fails the check.
// Records produced after the window, in flight when the next phase starts,
// are not the poison record's doing and are not measured.
func (r *run) healthyP99() Check {
	what := fmt.Sprintf("p99 produce-to-acknowledgement latency of healthy keys' records produced while the poison record was retried ≤ %v", r.plan.HealthyP99)
	s, ok := spanOf(r.spans, PhasePoison)
	if !ok {
		return Check{Group: Isolates, Name: "healthy_keys_p99", What: what, Limit: ms(r.plan.HealthyP99), Unit: "ms", Detail: "the poison phase did not run"}
	}
	lat, missing := r.healthyLatencies(s.Start, s.Inject)
	late, lateUnacked := r.healthyLatencies(s.Inject.Add(1), s.End)
	after := len(late) + lateUnacked
	p99 := quantile(lat, 0.99)
	c := atMost(Isolates, "healthy_keys_p99", what, ms(p99), ms(r.plan.HealthyP99), "ms",
		fmt.Sprintf("%d records over the %.1fs the poison record was retried; p50 %.1fms, p99 %.1fms, max %.1fms; %d produced after it was dead-lettered, not counted",
			len(lat), s.Inject.Sub(s.Start).Seconds(), ms(quantile(lat, 0.5)), ms(p99), ms(quantile(lat, 1)), after))
	switch {
	case missing > 0:
		c.Pass = false
		c.Detail = fmt.Sprintf("%d records produced while the poison record was retried were never acknowledged; %s", missing, c.Detail)
	case len(lat) == 0:
		c.Pass = false
		c.Detail = "no healthy records were produced while the poison record was retried"
	}
	return c
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// lagRecovers: within RecoverWithin of the phase's injection ending, the
// backlog the queue held then is consumed (every partition of the source
// and the tiers has committed past the end offset it had then, or shows no
// lag) and the lag, parked records included (kretry_parking_records), is
// back at its steady level (steadyLag). New records keep arriving at the steady rate,
// so the lag itself hovers above 0 by the records in flight.
func (r *run) lagRecovers(phase, name, after string) Check {
	what := fmt.Sprintf("lag back to 0 (the backlog consumed, the lag at its steady level) within %v after %s", r.plan.RecoverWithin, after)
	steady := r.steadyLag()
	s, ok := spanOf(r.spans, phase)
	at, ok2 := sampleAt(r.samples, s.Inject)
	if !ok || !ok2 {
		return Check{Group: Recovers, Name: name, What: what, Value: -1, Limit: r.plan.RecoverWithin.Seconds(), Unit: "s", Detail: "phase did not run"}
	}
	for _, sm := range r.samples {
		if !sm.At.After(at.At) || !sm.ScanOK {
			continue
		}
		drained := waiting(sm) <= steady
		for k, p := range at.Parts {
			if now, ok := sm.Parts[k]; !ok || (now.Committed < p.End && now.Lag > 0) {
				drained = false
				break
			}
		}
		if drained {
			return atMost(Recovers, name, what, sm.At.Sub(s.Inject).Seconds(), r.plan.RecoverWithin.Seconds(), "s",
				fmt.Sprintf("backlog of %d records then; lag %d and %.0f parked, steady level %d", at.LagTotal, sm.LagTotal, sm.Parked, steady))
		}
	}
	return Check{Group: Recovers, Name: name, What: what, Value: -1, Limit: r.plan.RecoverWithin.Seconds(), Unit: "s",
		Detail: fmt.Sprintf("the backlog of %d records then was not consumed, or the lag not back to its steady level %d, by the end of the run", at.LagTotal, steady)}
}

// steadyLag is the level the lag hovers at while the queue keeps up
// (records in flight, the commit interval): the largest lag of the steady
// phase after its first second, and at least the records the steady load
// writes in 500ms.
func (r *run) steadyLag() int64 {
	s, _ := spanOf(r.spans, PhaseSteady)
	m := int64(r.plan.SteadyRate * 0.5)
	for _, sm := range r.samples {
		if !sm.At.Before(s.Start.Add(time.Second)) && !sm.At.After(s.End) && sm.ScanOK {
			m = max(m, waiting(sm))
		}
	}
	return m
}

// waiting is the records waiting at a sample: the lag of the source and
// the tiers plus the records kretry holds parked.
func waiting(sm sample) int64 { return sm.LagTotal + int64(sm.Parked) }

// retrySpread: the retries of the synchronised failure arrive spread out:
// peak ÷ mean per 100 ms, over the time from the first failure to the last
// retry, ≤ MaxSpread, or no 100 ms holds more than a tenth of the records
// that failed together.
func (r *run) retrySpread() Check {
	what := fmt.Sprintf("retry arrivals of the %d records that failed together: peak/mean per 100ms ≤ %.0f, or no 100ms with more than %d of them",
		len(r.burst), r.plan.MaxSpread, len(r.burst)/10)
	in := map[int64]bool{}
	for _, id := range r.burst {
		in[id] = true
	}
	var first time.Time
	var retries []time.Time
	for _, a := range r.arrivals {
		switch {
		case !in[a.ID]:
		case a.Seen == 1 && (first.IsZero() || a.At.Before(first)):
			first = a.At
		case a.Seen > 1:
			retries = append(retries, a.At)
		}
	}
	if len(retries) == 0 {
		// Held back (a breaker) or never failed: no wave to spread. A run
		// that delivered nothing fails nothing_lost instead.
		return atMost(Recovers, "retries_spread", what, 0, r.plan.MaxSpread, "peak/mean", "no retries of them arrived")
	}
	ratio, peak, n := spread(retries, first, 100*time.Millisecond)
	c := atMost(Recovers, "retries_spread", what, ratio, r.plan.MaxSpread, "peak/mean",
		fmt.Sprintf("%d retries over %d buckets from the first failure; peak %d in 100ms", len(retries), n, peak))
	// A handful of retries (the rest held back, say by a breaker) forms
	// no wave, whatever their peak/mean: it takes a tenth of the records
	// that failed together in one 100ms.
	if small := len(r.burst) / 10; !c.Pass && peak <= small {
		c.Pass = true
		c.Detail += fmt.Sprintf("; passes by the second rule: a peak of %d ≤ %d (a tenth of them) is no wave", peak, small)
	}
	return c
}

// nothingLost: every produced record was acknowledged or dead-lettered,
// and the DLQ holds no record twice.
func (r *run) nothingLost() Check {
	acked := map[int64]bool{}
	for _, a := range r.arrivals {
		if a.Status/100 == 2 {
			acked[a.ID] = true
		}
	}
	dead := map[int64]int{}
	dups := 0
	for _, d := range r.dead {
		dead[d.ID]++
		if dead[d.ID] > 1 {
			dups++
		}
	}
	lost := 0
	for id := range r.produced {
		if !acked[id] && dead[id] == 0 {
			lost++
		}
	}
	detail := fmt.Sprintf("%d produced, %d acknowledged, %d dead-lettered, %d neither, %d DLQ duplicates", len(r.produced), len(acked), len(dead), lost, dups)
	if d, ok := spanOf(r.spans, PhaseDrain); ok && !d.Settled && lost > 0 {
		detail += fmt.Sprintf("; the queue had not drained when the run ended (%v after the load stopped): those records were still waiting, not known lost", r.plan.DrainSettle)
	}
	return atMost(Recovers, "nothing_lost", "records neither acknowledged nor dead-lettered by the end, plus DLQ duplicates = 0", float64(lost+dups), 0, "records", detail)
}
