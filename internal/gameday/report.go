package gameday

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Report is the outcome of a game day.
type Report struct {
	Plan    planInfo  `json:"plan"`
	Broker  string    `json:"broker"` // "embedded" or the --brokers list
	Started time.Time `json:"started"`
	// Peers in the order they ran; the first is kretry.
	Peers []*PeerReport `json:"peers"`
	// OK: every check of the kretry peer passed (true when it did not
	// run, --peers blocking). The blocking peer's checks are there for
	// contrast and do not count.
	OK         bool  `json:"ok"`
	DurationMS int64 `json:"duration_ms"`
}

// PeerReport is one peer's run.
type PeerReport struct {
	Peer string `json:"peer"`
	// Setup is how the peer ran: kretry's config keys, or the blocking
	// peer's backoffs.
	Setup  string  `json:"setup"`
	OK     bool    `json:"ok"`
	Checks []Check `json:"checks"`
	// Phases hold each phase's figures.
	Phases []PhaseStats `json:"phases"`
	// Answers are the seeds' four on-call questions, answered for this run.
	Answers []Answer `json:"answers"`
	// DeadLetters are the records read from the peer's DLQ.
	DeadLetters []deadLetter `json:"dead_letters"`
	// Timeline is the run sample by sample (about every 100ms).
	Timeline []point `json:"timeline"`
	// PhaseTimes place the phases on the timeline, in seconds.
	PhaseTimes []phaseTime `json:"phase_times"`
}

type phaseTime struct {
	Name    string  `json:"name"`
	Start   float64 `json:"start_s"`
	Inject  float64 `json:"inject_end_s"`
	End     float64 `json:"end_s"`
	Settled bool    `json:"settled"`
}

// planInfo is the Plan with durations in milliseconds, for --json.
type planInfo struct {
	Name              string    `json:"name"`
	Partitions        int32     `json:"partitions"`
	Keys              int       `json:"keys"`
	CapacityPerSecond float64   `json:"dependency_capacity_per_second"`
	AppWorkers        int       `json:"app_workers"`
	ServiceTimeMS     float64   `json:"service_time_ms"`
	SlowServiceTimeMS float64   `json:"slow_service_time_ms"`
	MaxInFlight       int       `json:"max_in_flight"`
	AppTimeoutMS      float64   `json:"app_timeout_ms"`
	TiersMS           []float64 `json:"tiers_ms"`
	Jitter            float64   `json:"jitter"`
	SteadyRate        float64   `json:"steady_rate"`
	SteadyMS          float64   `json:"steady_ms"`
	SpikeRate         float64   `json:"spike_rate"`
	SpikeMS           float64   `json:"spike_ms"`
	SlowMS            float64   `json:"slow_ms"`
	FailMS            float64   `json:"fail_ms"`
	Burst             int       `json:"burst"`
	BlipMS            float64   `json:"blip_ms"`
	SettleMS          float64   `json:"settle_ms"`
	DrainSettleMS     float64   `json:"drain_settle_ms"`
	RecoverWithinMS   float64   `json:"recover_within_ms"`
	HealthyP99MS      float64   `json:"healthy_p99_ms"`
	BudgetRatio       float64   `json:"budget_ratio"`
	BudgetPerSecond   float64   `json:"budget_per_second"`
	BudgetWindowMS    float64   `json:"budget_window_ms"`
	MaxSpread         float64   `json:"max_spread"`
	PausedSlack       int       `json:"paused_slack"`
	OpenWithinMS      float64   `json:"open_within_ms"`
}

func planJSON(p *Plan) planInfo {
	pi := planInfo{Name: p.Name, Partitions: p.Partitions, Keys: p.Keys, CapacityPerSecond: p.capacity(),
		AppWorkers: p.AppWorkers, ServiceTimeMS: ms(p.ServiceTime), SlowServiceTimeMS: ms(p.SlowServiceTime),
		MaxInFlight: p.MaxInFlight, AppTimeoutMS: ms(p.AppTimeout), Jitter: p.Jitter,
		SteadyRate: p.SteadyRate, SteadyMS: ms(p.SteadyFor), SpikeRate: p.SpikeRate,
		SpikeMS: ms(p.SpikeFor), SlowMS: ms(p.SlowFor), FailMS: ms(p.FailFor), Burst: p.Burst,
		BlipMS: ms(p.BlipFor), SettleMS: ms(p.Settle), DrainSettleMS: ms(p.DrainSettle),
		RecoverWithinMS: ms(p.RecoverWithin), HealthyP99MS: ms(p.HealthyP99), BudgetRatio: p.BudgetRatio,
		BudgetPerSecond: p.BudgetPerSecond, BudgetWindowMS: ms(p.BudgetWindow), MaxSpread: p.MaxSpread,
		PausedSlack: p.PausedSlack, OpenWithinMS: ms(p.OpenWithin)}
	for _, t := range p.Tiers {
		pi.TiersMS = append(pi.TiersMS, ms(t))
	}
	return pi
}

func (r *Report) finish() {
	r.DurationMS = time.Since(r.Started).Milliseconds()
	r.OK = true
	for _, p := range r.Peers {
		if p.Peer == "kretry" {
			r.OK = r.OK && p.OK // --peers may name it twice
		}
	}
}

// ranKretry reports whether the kretry peer ran (--peers may leave it out).
func (r *Report) ranKretry() bool {
	return slices.ContainsFunc(r.Peers, func(p *PeerReport) bool { return p.Peer == "kretry" })
}

// notRun is the verdict of a game day without the kretry peer.
const notRun = "kretry did not run (--peers): the blocking peer's checks are for contrast and set no exit status"

// analyze judges one peer's run.
func analyze(peer string, p *Plan, spans []span, samples []sample, arr []arrival, dead []deadLetter, produced map[int64]order, poison int64, burst []int64) *PeerReport {
	r := &run{peer: peer, plan: p, spans: spans, samples: samples, arrivals: arr, dead: dead, produced: produced, poison: poison, burst: burst}
	start := spans[0].Start
	pr := &PeerReport{Peer: peer, Checks: r.checks(), DeadLetters: dead, Timeline: timeline(start, samples, arr)}
	pr.OK = true
	for _, c := range pr.Checks {
		pr.OK = pr.OK && c.Pass
	}
	for _, s := range spans {
		pr.PhaseTimes = append(pr.PhaseTimes, phaseTime{Name: s.Name, Start: s.Start.Sub(start).Seconds(),
			Inject: s.Inject.Sub(start).Seconds(), End: s.End.Sub(start).Seconds(), Settled: s.Settled})
		pr.Phases = append(pr.Phases, r.phaseStats(s))
	}
	pr.Answers = r.answers(pr.Phases)
	return pr
}

// Print writes the report for people: per peer the checks, the phases and
// the four answers.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "kretry gameday (%s plan, %s broker): dependency capacity %.0f records/s, steady %.0f/s, spike %.0f/s for %v, slow %v then failing %v, 1 poison record, %d records failing together\n",
		r.Plan.Name, r.Broker, r.Plan.CapacityPerSecond, r.Plan.SteadyRate, r.Plan.SpikeRate, time.Duration(r.Plan.SpikeMS)*time.Millisecond,
		time.Duration(r.Plan.SlowMS)*time.Millisecond, time.Duration(r.Plan.FailMS)*time.Millisecond, r.Plan.Burst)
	for _, p := range r.Peers {
		fmt.Fprintf(w, "\n== %s: %s\n", p.Peer, p.Setup)
		fmt.Fprintf(w, "\n%-9s %6s %9s %9s %8s %8s %8s %9s %9s %9s %5s %5s\n", "phase", "secs", "enqueue/s", "drain/s", "max lag", "retries", "dead", "dep p50", "dep p99", "e2e p99", "open", "cpu")
		for _, ph := range p.Phases {
			cpu := "-"
			if ph.CPUCores >= 0 {
				cpu = fmt.Sprintf("%.1f", ph.CPUCores)
			}
			fmt.Fprintf(w, "%-9s %6.1f %9.0f %9.0f %8d %8d %8d %7.1fms %7.1fms %7.0fms %4.1fs %5s\n", ph.Name, ph.Seconds, ph.EnqueueRate, ph.DrainRate,
				ph.MaxLag, ph.Retries, ph.DeadLettered, ph.DependencyP50MS, ph.DependencyP99MS, ph.HealthyP99MS, ph.BreakerOpenSeconds, cpu)
		}
		fmt.Fprintln(w)
		for _, c := range p.Checks {
			verdict := "PASS"
			if !c.Pass {
				verdict = "FAIL"
			}
			fmt.Fprintf(w, "  %s  %-8s %s: %s %s (limit %s)", verdict, c.Group, c.What, num(c.Value), c.Unit, num(c.Limit))
			if c.Detail != "" {
				fmt.Fprintf(w, "; %s", c.Detail)
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
		for _, a := range p.Answers {
			fmt.Fprintf(w, "  Q: %s\n     %s\n", a.Question, strings.ReplaceAll(a.Answer, "\n", "\n     "))
		}
	}
	verdict := "OK: kretry slowed, isolated and recovered: every check passed"
	if !r.ranKretry() {
		verdict = notRun
	} else if !r.OK {
		var failed []string
		for _, p := range r.Peers {
			if p.Peer != "kretry" {
				continue
			}
			for _, c := range p.Checks {
				if !c.Pass {
					failed = append(failed, c.Group+"/"+c.Name)
				}
			}
		}
		verdict = "FAILED: kretry checks " + strings.Join(failed, ", ")
	}
	fmt.Fprintf(w, "\n%s (%.1fs)\n", verdict, float64(r.DurationMS)/1000)
}

func num(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}
