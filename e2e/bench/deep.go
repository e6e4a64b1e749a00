package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Three targets divide the rec/s of a run with trouble in it by the same
// peer's healthy rec/s: the other keys with a slow key (≥ 0.95×, issue 10)
// and, with 1% of the keys failing, the healthy keys and all records
// (≥ 0.9×, issue 3). On 6 December kretry in-process drained the table's
// 20,000-record backlog in 26–51ms, a window that one transaction or one
// GC moves by a third (docs/PERFORMANCE.md). So, with -deep-records N,
// kretry's and kretry-http's slow-key and 1%-keys runs are run again after
// the table on a backlog of N records, as healthy, slow-key, healthy,
// 1%-keys, healthy, and those targets divide each deep run by the mean of
// its deep healthy neighbours. The table's rows keep -records, so that the
// peers compare on the same backlog; a deep run has no row of its own.
var (
	deepPeers     = []string{"kretry", "kretry-http"}
	deepWorkloads = []string{"slow-key", "1%-keys"}
)

// deepSteps is the deep block of each of ps that is a deepPeers peer:
// nothing when ws has no healthy workload or none of deepWorkloads.
func deepSteps(ws []*workload, ps []*peer) []step {
	var healthy *workload
	var deep []*workload
	for _, w := range ws {
		switch {
		case w.name == "healthy":
			healthy = w
		case slices.Contains(deepWorkloads, w.name):
			deep = append(deep, w)
		}
	}
	if healthy == nil || len(deep) == 0 {
		return nil
	}
	var steps []step
	for _, p := range ps {
		if !slices.Contains(deepPeers, p.name) {
			continue
		}
		steps = append(steps, step{w: healthy, p: p, adjacentHealthy: true, deep: true})
		for _, w := range deep {
			steps = append(steps, step{w: w, p: p, bracketed: true, deep: true},
				step{w: healthy, p: p, adjacentHealthy: true, deep: true})
		}
	}
	return steps
}

// deepRuns is the deep runs of all, in the order they ran.
func deepRuns(all []*result) []*result {
	var rs []*result
	for _, r := range all {
		if r.deep {
			rs = append(rs, r)
		}
	}
	return rs
}

// deepOwn is peer pn's deep run of workload wl and the mean of its usable
// deep healthy neighbours; both nil when there is no such run or no
// neighbour to divide by (a deep run is never divided by the table's row,
// which drained a shallower backlog).
func deepOwn(deep []*result, wl, pn string) (*result, *result) {
	for _, r := range deep {
		if r.bracketed && r.err == nil && r.w.name == wl && r.p.name == pn && len(r.adjacent) > 0 {
			return r, ownHealthy(r, nil)
		}
	}
	return nil, nil
}

// reportDeep prints each deep run: its backlog, its healthy neighbours,
// its ratios against their mean and its transactions.
func reportDeep(out io.Writer, deep []*result) {
	var lines []string
	for _, r := range deep {
		if !r.bracketed {
			continue
		}
		if r.err != nil {
			lines = append(lines, fmt.Sprintf("      %-9s %-12s error: %s", r.w.name, r.p.name, short(r.err)))
			continue
		}
		var rates []string
		for _, b := range r.adjacent {
			rates = append(rates, fmt.Sprintf("%.0f", b.recPerSec))
		}
		l := fmt.Sprintf("      %-9s %-12s %d records; healthy neighbours %s rec/s", r.w.name, r.p.name, r.backlog, strings.Join(rates, ", "))
		if r.unusable > 0 {
			l += fmt.Sprintf(" (%d more failed or did not finish: not counted)", r.unusable)
		}
		if _, own := deepOwn(deep, r.w.name, r.p.name); own != nil {
			l += fmt.Sprintf("; healthy-key rec/s %.0f = %s, all records %.0f = %s", r.healthyPerSec, ratio(r.healthyPerSec, own.recPerSec),
				r.recPerSec, ratio(r.recPerSec, own.recPerSec))
		}
		lines = append(lines, l, "                             "+r.txns)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(out, "\n    deep runs (deep.go; the slow-key and 1%-keys rec/s targets divide these by their healthy neighbours' mean):")
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
}
