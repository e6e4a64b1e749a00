package gameday

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

func sortTimes(ts []time.Time) { slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) }) }

// countIn counts the sorted times in (from, to].
func countIn(ts []time.Time, from, to time.Time) int {
	lo := sort.Search(len(ts), func(i int) bool { return ts[i].After(from) })
	hi := sort.Search(len(ts), func(i int) bool { return ts[i].After(to) })
	return hi - lo
}

// quantile returns the q quantile (nearest rank) of ds, 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// sampleAt returns the first sample at or after t with a complete scan.
func sampleAt(samples []sample, t time.Time) (sample, bool) {
	for _, s := range samples {
		if !s.At.Before(t) && s.ScanOK {
			return s, true
		}
	}
	return sample{}, false
}

// sampleBefore returns the last complete sample at or before t.
func sampleBefore(samples []sample, t time.Time) (sample, bool) {
	var out sample
	ok := false
	for _, s := range samples {
		if s.At.After(t) {
			break
		}
		if s.ScanOK {
			out, ok = s, true
		}
	}
	return out, ok
}

// spread is the peak ÷ mean of the times per bucket, over the buckets from
// from to the last time; buckets is their number.
func spread(ts []time.Time, from time.Time, bucket time.Duration) (ratio float64, peak, buckets int) {
	if len(ts) == 0 {
		return 0, 0, 0
	}
	sortTimes(ts)
	n := int(ts[len(ts)-1].Sub(from)/bucket) + 1
	counts := make([]int, n)
	for _, t := range ts {
		i := int(t.Sub(from) / bucket)
		counts[min(max(i, 0), n-1)]++
	}
	peak = slices.Max(counts)
	return float64(peak) / (float64(len(ts)) / float64(n)), peak, n
}

// firstAcks returns, per record id, when the app first answered it 2xx
// (a record may be delivered again after an aborted transaction: at least
// once).
func firstAcks(arr []arrival) map[int64]time.Time {
	out := map[int64]time.Time{}
	for _, a := range arr {
		if a.Status/100 != 2 {
			continue
		}
		if t, ok := out[a.ID]; !ok || a.Done.Before(t) {
			out[a.ID] = a.Done
		}
	}
	return out
}

// countList writes counts for people: "failing 8, burst 2", the keys in
// the order of first (phase names, say), then the others sorted.
func countList(m map[string]int, first []string) string {
	var parts []string
	for _, k := range first {
		if n, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(first, k) {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
	}
	return strings.Join(parts, ", ")
}
