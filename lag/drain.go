package lag

import "math"

// DrainRate is the consume rate of one group's partition over its samples
// (the status window), in records (offsets) per second: how far the
// committed offset moved from the first sample with a commit to the latest,
// divided by the time between them. ok is false when that cannot be told:
// fewer than two samples with a commit, an error in the latest sample, no
// time between them, or a committed offset that went back (a reset, a
// recreated topic).
func DrainRate(samples []Sample) (rate float64, ok bool) {
	if len(samples) < 2 {
		return 0, false
	}
	last := samples[len(samples)-1]
	if last.Err || last.Committed < 0 {
		return 0, false
	}
	for _, s := range samples[:len(samples)-1] {
		if s.Err || s.Committed < 0 {
			continue
		}
		span := last.Time.Sub(s.Time)
		if span <= 0 || last.Committed < s.Committed {
			return 0, false
		}
		return float64(last.Committed-s.Committed) / span.Seconds(), true
	}
	return 0, false
}

// TimeToDrain estimates how long a lag of lag records takes to consume at
// rate records per second: lag ÷ rate, in seconds; 0 when lag is 0, and
// +Inf when the lag is above 0 and the rate is 0 (nothing is consumed: at
// this pace it never drains). It ignores the records that arrive
// meanwhile, so it underestimates when the produce rate is close to the
// consume rate (see docs/METRICS.md).
func TimeToDrain(lag int64, rate float64) float64 {
	switch {
	case lag <= 0:
		return 0
	case rate <= 0:
		return math.Inf(1)
	}
	return float64(lag) / rate
}

// drain fills a row's DrainRate, TimeToDrain and their Known flags from
// its samples.
func (r *Row) drain(samples []Sample) {
	if r.Error != "" {
		return
	}
	r.DrainRate, r.DrainRateKnown = DrainRate(samples)
	switch {
	case r.Lag == 0:
		r.TimeToDrain, r.TimeToDrainKnown = 0, true
	case r.DrainRateKnown:
		r.TimeToDrain, r.TimeToDrainKnown = TimeToDrain(r.Lag, r.DrainRate), true
	}
}
