package gameday

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"time"
)

// PhaseStats are one phase's figures. Rates are records/s; latencies are
// the dependency's (the app's answer time), in ms.
type PhaseStats struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Settled bool    `json:"settled"`
	// EnqueueRate: records produced in the phase ÷ its length;
	// PeakEnqueueRate the highest over 500ms.
	EnqueueRate     float64 `json:"enqueue_rate"`
	PeakEnqueueRate float64 `json:"peak_enqueue_rate"`
	// DrainRate: acknowledgements at the app ÷ the phase's length.
	DrainRate float64 `json:"drain_rate"`
	MaxLag    int64   `json:"max_lag"`
	// Deliveries arrived at the app; Retries those of a record already
	// delivered before; RetriesOK those of them answered 2xx; Failed the
	// answers that were not 2xx.
	Deliveries   int `json:"deliveries"`
	Retries      int `json:"retries"`
	RetriesOK    int `json:"retries_ok"`
	Failed       int `json:"failed"`
	DeadLettered int `json:"dead_lettered"`
	// DependencyP50MS and DependencyP99MS: the app's answer time.
	DependencyP50MS float64 `json:"dependency_p50_ms"`
	DependencyP99MS float64 `json:"dependency_p99_ms"`
	// HealthyP50MS, HealthyP99MS and HealthyMaxMS: end-to-end latency of
	// the steady records produced in the phase, from their produce time to
	// the app's first 2xx, in ms; records produced near a phase's end may
	// be answered in the next one (healthy_keys_p99 has its own window).
	// Records never answered 2xx are not in them.
	HealthyP50MS float64 `json:"healthy_p50_ms"`
	HealthyP99MS float64 `json:"healthy_p99_ms"`
	HealthyMaxMS float64 `json:"healthy_max_ms"`
	// BreakerOpenSeconds: time the breaker gauge said open (from /metrics).
	BreakerOpenSeconds float64 `json:"breaker_open_seconds"`
	// MaxInFlight: the most deliveries under way at once (from /metrics).
	MaxInFlight float64 `json:"max_in_flight"`
	// CPUCores: this process's CPU time over the phase ÷ its length (-1
	// unknown); CPUs is runtime.NumCPU.
	CPUCores float64 `json:"cpu_cores"`
	CPUs     int     `json:"cpus"`
}

func (r *run) phaseStats(s span) PhaseStats {
	secs := s.End.Sub(s.Start).Seconds()
	ps := PhaseStats{Name: s.Name, Seconds: secs, Settled: s.Settled}
	in := func(t time.Time) bool { return !t.Before(s.Start) && !t.After(s.End) }
	produced := 0
	for _, o := range r.produced {
		if in(time.Unix(0, o.Produced)) {
			produced++
		}
	}
	lat, acks := r.arrivalStats(&ps, in)
	for _, d := range r.dead {
		if in(d.At) {
			ps.DeadLettered++
		}
	}
	r.sampleStats(&ps, s, in)
	if secs > 0 {
		ps.EnqueueRate = float64(produced) / secs
		ps.DrainRate = float64(acks) / secs
	}
	start := r.spans[0].Start
	for _, p := range timeline(start, r.samples, nil) {
		if t := start.Add(time.Duration(p.T * float64(time.Second))); in(t) {
			ps.PeakEnqueueRate = max(ps.PeakEnqueueRate, p.Enqueue)
		}
	}
	ps.DependencyP50MS, ps.DependencyP99MS = ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99))
	e2e, _ := r.healthyLatencies(s.Start, s.End)
	ps.HealthyP50MS, ps.HealthyP99MS, ps.HealthyMaxMS = ms(quantile(e2e, 0.5)), ms(quantile(e2e, 0.99)), ms(quantile(e2e, 1))
	return ps
}

// arrivalStats counts the app's deliveries in the phase into ps and
// returns the dependency latencies of its 2xx answers and their count.
func (r *run) arrivalStats(ps *PhaseStats, in func(time.Time) bool) (lat []time.Duration, acks int) {
	for _, a := range r.arrivals {
		if !in(a.At) {
			continue
		}
		ps.Deliveries++
		ok := a.Status/100 == 2
		if ok {
			acks++
			lat = append(lat, a.Latency)
		} else {
			ps.Failed++
		}
		if a.Seen > 1 {
			ps.Retries++
			if ok {
				ps.RetriesOK++
			}
		}
	}
	return lat, acks
}

// sampleStats reads the phase's CPU, lag, in-flight and breaker figures
// off the samples into ps.
func (r *run) sampleStats(ps *PhaseStats, s span, in func(time.Time) bool) {
	ps.CPUCores, ps.CPUs = -1, runtime.NumCPU()
	first, ok1 := sampleAt(r.samples, s.Start)
	end, ok2 := sampleBefore(r.samples, s.End)
	if ok1 && ok2 && first.CPU >= 0 && end.At.After(first.At) {
		ps.CPUCores = (end.CPU - first.CPU) / end.At.Sub(first.At).Seconds()
	}
	var prev time.Time
	for i, sm := range r.samples {
		if !in(sm.At) {
			continue
		}
		ps.MaxLag = max(ps.MaxLag, sm.LagTotal)
		ps.MaxInFlight = max(ps.MaxInFlight, sm.InFlight)
		if sm.Breaker == 1 && i > 0 && !prev.IsZero() {
			ps.BreakerOpenSeconds += sm.At.Sub(prev).Seconds()
		}
		prev = sm.At
	}
}

// healthyLatencies returns the end-to-end latency (produce time to the
// app's first 2xx) of each steady record produced in [from, to] that was
// acknowledged, and how many of them were not.
func (r *run) healthyLatencies(from, to time.Time) (lat []time.Duration, unacked int) {
	if r.acks == nil {
		r.acks = firstAcks(r.arrivals)
	}
	for id, o := range r.produced {
		prod := time.Unix(0, o.Produced)
		switch {
		case o.Kind != kindSteady || prod.Before(from) || prod.After(to):
		case r.acks[id].IsZero():
			unacked++
		default:
			lat = append(lat, r.acks[id].Sub(prod))
		}
	}
	return lat, unacked
}

// Answer is one of the seeds' four on-call questions, answered for a run.
type Answer struct {
	Question string `json:"question"`
	Answer   string `json:"answer"`
}

// The seeds' (Backlog Workflow) on-call questions.
const (
	QuestionBudget  = "Is new work entering faster than the system budget?"
	QuestionDrain   = "Is consumer drain rate lower because of compute, partitioning, downstream limits, or poison data?"
	QuestionRetries = "Are retries helping recovery or consuming the recovery budget?"
	QuestionDLQ     = "Can quarantined messages be repaired, replayed, or discarded safely?"
)

func (r *run) answers(phases []PhaseStats) []Answer {
	return []Answer{{QuestionBudget, r.answerBudget(phases)}, {QuestionDrain, r.answerDrain(phases)},
		{QuestionRetries, r.answerRetries(phases)}, {QuestionDLQ, r.answerDLQ()}}
}

// drainCapacity is the most the peer can drain from a healthy dependency:
// kretry is bound by the dependency (and max_in_flight), the blocking peer
// by one record at a time per partition.
func (r *run) drainCapacity() float64 {
	c := min(r.plan.capacity(), float64(r.plan.MaxInFlight)/r.plan.ServiceTime.Seconds())
	if r.peer == "blocking" {
		c = min(c, float64(r.plan.Partitions)/r.plan.ServiceTime.Seconds())
	}
	return c
}

func (r *run) answerBudget(phases []PhaseStats) string {
	capacity := r.drainCapacity()
	var over []string
	for _, p := range phases {
		if p.PeakEnqueueRate > capacity {
			over = append(over, fmt.Sprintf("%s: up to %.0f records/s against a drain capacity of %.0f/s (drained %.0f/s on average), lag peaked at %d%s",
				p.Name, p.PeakEnqueueRate, capacity, p.DrainRate, p.MaxLag, recovered(r, p.Name)))
		}
	}
	if len(over) == 0 {
		return fmt.Sprintf("No: enqueue stayed within the drain capacity of %.0f records/s.", capacity)
	}
	return "Yes, in " + strings.Join(over, "; ") + fmt.Sprintf(". The steady load (%.0f/s) is within budget.", r.plan.SteadyRate)
}

func recovered(r *run, phase string) string {
	for _, c := range r.checks() {
		if (phase == PhaseSpike && c.Name == "spike_drained") || (phase == PhaseFailing && c.Name == "outage_drained") {
			if c.Value >= 0 {
				return fmt.Sprintf(", back to 0 %.1fs after", c.Value)
			}
			return ", never back to 0"
		}
	}
	return ""
}

func (r *run) answerDrain(phases []PhaseStats) string {
	steady := phases[0]
	var lines []string
	for _, p := range phases[1:] {
		var why string
		switch {
		case p.Deliveries > 0 && float64(p.Failed) >= 0.5*float64(p.Deliveries):
			why = fmt.Sprintf("downstream: the dependency failed %d of %d deliveries", p.Failed, p.Deliveries)
			if p.BreakerOpenSeconds > 0 {
				why += fmt.Sprintf("; the breaker was open %.1fs", p.BreakerOpenSeconds)
			}
		case p.CPUCores >= 0.9*float64(p.CPUs):
			why = fmt.Sprintf("compute: the process used %.1f of %d CPUs", p.CPUCores, p.CPUs)
		case p.Name == PhasePoison:
			why = fmt.Sprintf("poison data: 1 record failed every delivery (%d dead-lettered in the phase), healthy keys drained at %.0f/s", p.DeadLettered, p.DrainRate)
		case steady.DependencyP50MS > 0 && p.DependencyP50MS > 2*steady.DependencyP50MS:
			why = fmt.Sprintf("downstream limits: the dependency's p50 rose from %.1fms to %.1fms", steady.DependencyP50MS, p.DependencyP50MS)
		case p.PeakEnqueueRate > r.drainCapacity() && r.peer == "blocking":
			why = fmt.Sprintf("partitioning: one record at a time per partition caps the drain at %d ÷ %v = %.0f/s", r.plan.Partitions, r.plan.ServiceTime, r.drainCapacity())
		case p.PeakEnqueueRate > r.drainCapacity():
			why = fmt.Sprintf("downstream limits: the dependency's %d workers (%.0f/s); %.0f deliveries in flight at most", r.plan.AppWorkers, r.plan.capacity(), p.MaxInFlight)
		default:
			continue
		}
		lines = append(lines, fmt.Sprintf("%s (%.0f/s drained, max lag %d): %s", p.Name, p.DrainRate, p.MaxLag, why))
	}
	if len(lines) == 0 {
		return "It is not lower: the drain kept up in every phase."
	}
	cpu := ""
	for _, p := range phases {
		if p.CPUCores >= 0 {
			cpu += fmt.Sprintf(" %s %.1f", p.Name, p.CPUCores)
		}
	}
	if cpu != "" {
		cpu = fmt.Sprintf("\nCPU (this process, of %d):%s; shared machines show others' load too.", runtime.NumCPU(), cpu)
	}
	return strings.Join(lines, "\n") + cpu
}

func (r *run) answerRetries(phases []PhaseStats) string {
	var del, ret, ok int
	var parts []string
	for _, p := range phases {
		del, ret, ok = del+p.Deliveries, ret+p.Retries, ok+p.RetriesOK
		if p.Retries > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (%d ok)", p.Name, p.Retries, p.RetriesOK))
		}
	}
	if ret == 0 {
		return "No retries were made."
	}
	budget := r.retryBudget()
	verdict := "helping: within the retry budget"
	switch {
	case !budget.Pass:
		verdict = "consuming the recovery budget: over it (" + budget.Detail + ")"
	case ok*2 < ret:
		verdict = "mostly failing: most retries failed again"
	}
	return fmt.Sprintf("%d redeliveries (%.0f%% of %d deliveries), %.0f%% of them succeeded: %s. By phase: %s.",
		ret, 100*float64(ret)/float64(max(del, 1)), del, 100*float64(ok)/float64(ret), verdict, strings.Join(parts, ", "))
}

func (r *run) answerDLQ() string {
	if len(r.dead) == 0 {
		return "The DLQ is empty."
	}
	prints := map[string]int{}
	ids, origin, kinds := map[int64]int{}, 0, map[string]int{}
	for _, d := range r.dead {
		fp := "no error recorded"
		if d.Class != "" {
			msg := d.Message
			if len(msg) > 40 {
				msg = msg[:40] + "…"
			}
			fp = fmt.Sprintf("%s %s %q", d.Class, d.Status, msg)
		}
		prints[fp]++
		ids[d.ID]++
		kinds[d.Kind]++
		if d.Origin {
			origin++
		}
	}
	var fps []string
	for _, k := range slices.Sorted(maps.Keys(prints)) {
		fps = append(fps, fmt.Sprintf("%d× %s", prints[k], k))
	}
	dups := len(r.dead) - len(ids)
	noun := "records"
	if len(r.dead) == 1 {
		noun = "record"
	}
	s := fmt.Sprintf("%d %s (%s); %d duplicates; by kind: %s.", len(r.dead), noun, strings.Join(fps, "; "), dups, countList(kinds, []string{kindSteady, kindBurst, kindPoison}))
	switch {
	case origin == len(r.dead):
		s += " Each carries its original topic, partition, offset and the error: replay it once the cause is fixed (`kretry dlq redrive`, exactly once), or discard it with a reason (`kretry dlq discard`); `kretry dlq stats` groups them by fingerprint."
	default:
		s += fmt.Sprintf(" %d of them carry neither the error nor their original coordinates: which failure put each there is unknown, so each must be inspected by hand before a replay.", len(r.dead)-origin)
	}
	if n := len(r.dead) - kinds[kindPoison]; n > 0 {
		s += fmt.Sprintf(" %d healthy records were dead-lettered by the dependency's failure: all of them must be replayed.", n)
	}
	return s
}
