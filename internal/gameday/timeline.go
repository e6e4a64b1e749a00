package gameday

import (
	"time"
)

// point is the timeline of a run at one sample, for the chart and --json.
// Rates are records/s over the trailing rateWindow.
type point struct {
	T        float64          `json:"t_s"` // since the run started
	Lag      int64            `json:"lag"` // source + tiers
	LagStage map[string]int64 `json:"lag_by_stage"`
	Enqueue  float64          `json:"enqueue_rate"` // records written to the source
	Drain    float64          `json:"drain_rate"`   // records acknowledged by the app
	Retry    float64          `json:"retry_rate"`   // redeliveries arriving at the app
	Breaker  float64          `json:"breaker_state"`
	Depend   float64          `json:"dependency_state"`
	DLQ      int              `json:"dlq"`
	// Metrics: kretry's /metrics was read (Breaker and Depend are from it).
	Metrics bool `json:"metrics"`
}

const rateWindow = 500 * time.Millisecond

// timeline turns the samples and the app's log into points.
func timeline(start time.Time, samples []sample, arr []arrival) []point {
	acks, retries := make([]time.Time, 0, len(arr)), []time.Time{}
	for _, a := range arr {
		if a.Status/100 == 2 {
			acks = append(acks, a.Done)
		}
		if a.Seen > 1 {
			retries = append(retries, a.At)
		}
	}
	sortTimes(acks)
	sortTimes(retries)
	out := make([]point, 0, len(samples))
	j := 0 // the sample rateWindow before i
	for i, s := range samples {
		for j < i && s.At.Sub(samples[j].At) > rateWindow {
			j++
		}
		p := point{T: s.At.Sub(start).Seconds(), Lag: s.LagTotal, LagStage: s.Lag, Breaker: s.Breaker,
			Depend: s.Dependency, DLQ: s.DLQ, Metrics: s.Metrics}
		if dt := s.At.Sub(samples[j].At).Seconds(); dt > 0 {
			p.Enqueue = float64(s.SourceEnd-samples[j].SourceEnd) / dt
		}
		p.Drain = float64(countIn(acks, s.At.Add(-rateWindow), s.At)) / rateWindow.Seconds()
		p.Retry = float64(countIn(retries, s.At.Add(-rateWindow), s.At)) / rateWindow.Seconds()
		out = append(out, p)
	}
	return out
}
