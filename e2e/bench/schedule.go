package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Two of issue 10's targets divide a run by the same peer's healthy run:
// kretry's healthy-key p99 with failing keys (≤ 1.3×) and the other keys'
// rec/s with a slow key (≥ 0.95×). This machine's speed over HTTP has two
// modes, switching within tens of seconds to minutes (docs/PERFORMANCE.md, "Where
// kretry is behind"), and in the table's order a peer's healthy run and
// its slow-key run are minutes apart on Kafka, so a switch between them
// moved that ratio by ±25%. With -adjacent-baselines the failures and
// slow-key runs of these peers run at the end of the table as healthy,
// failures, healthy, slow-key, healthy, and each is divided by the mean of
// the healthy runs just before and after it; the report prints those runs
// and the ratio against the table's healthy row as well. It is off by
// default: in three whole tables on 6 December it did not remove the noise
// (neighbours seconds apart differed by up to 1.9×) and, on Kafka, the
// failures runs moved to the table's end had retry lateness of 200–330ms
// against 5–53ms on a fresh node (docs/PERFORMANCE.md, "6 December").
var (
	adjacentPeers     = []string{"kretry", "kretry-http"}
	adjacentWorkloads = []string{"failures", "slow-key"}
)

// step is one run of a table. A bracketed step (failures or slow-key of
// an adjacentPeers peer) runs between two adjacentHealthy steps: healthy
// runs that have no row in the table.
// A deep step runs on -deep-records records (deep.go).
type step struct {
	w               *workload
	p               *peer
	bracketed       bool
	adjacentHealthy bool
	deep            bool
}

// schedule orders one table's runs: workload by workload, every peer that
// runs it (so peers compared with each other run close together), then,
// when adjacent is set, the adjacent-baseline blocks, then, when deep is
// set, the deep blocks (deep.go).
func schedule(ws []*workload, ps []*peer, adjacent, deep bool) []step {
	var healthy *workload
	for _, w := range ws {
		if w.name == "healthy" {
			healthy = w
		}
	}
	isAdjacent := func(w *workload, p *peer) bool {
		return adjacent && healthy != nil && slices.Contains(adjacentWorkloads, w.name) && slices.Contains(adjacentPeers, p.name)
	}
	var steps []step
	for _, w := range ws {
		for _, p := range ps {
			if !isAdjacent(w, p) {
				steps = append(steps, step{w: w, p: p})
			}
		}
	}
	for _, p := range ps {
		block := []step{{w: healthy, p: p, adjacentHealthy: true}}
		for _, w := range ws {
			if isAdjacent(w, p) {
				block = append(block, step{w: w, p: p, bracketed: true}, step{w: healthy, p: p, adjacentHealthy: true})
			}
		}
		if len(block) > 1 {
			steps = append(steps, block...)
		}
	}
	if deep {
		steps = append(steps, deepSteps(ws, ps)...)
	}
	return steps
}

// linkBaselines gives every bracketed run the adjacent healthy runs just
// before and after it. rs is in the order the steps ran. A failed run gets
// none; a healthy run that failed, saw no fetch, did not drain its backlog
// or did not finish its paced phase is not lent (reportAdjacent says so).
func linkBaselines(rs []*result) {
	for i, r := range rs {
		if !r.bracketed || r.err != nil {
			continue
		}
		for _, j := range []int{i - 1, i + 1} {
			if j >= 0 && j < len(rs) && rs[j].adjacentHealthy && rs[j].p == r.p && rs[j].deep == r.deep {
				if usable(rs[j]) {
					r.adjacent = append(r.adjacent, rs[j])
				} else {
					r.unusable++
				}
			}
		}
	}
}

// usable reports whether an adjacent healthy run can be divided by.
func usable(b *result) bool {
	return b.err == nil && b.recPerSec > 0 && b.p99 > 0 && b.drainComplete && b.pacedComplete
}

// tableRows is the table's runs, baselines and deep runs left out, in the
// order of the workloads and then of the peers, whatever order they ran in.
func tableRows(all []*result) []*result {
	var rs []*result
	for _, r := range all {
		if !r.adjacentHealthy && !r.deep {
			rs = append(rs, r)
		}
	}
	slices.SortStableFunc(rs, func(a, b *result) int {
		if c := slices.Index(workloads, a.w) - slices.Index(workloads, b.w); c != 0 {
			return c
		}
		return slices.Index(peers, a.p) - slices.Index(peers, b.p)
	})
	return rs
}

// ownHealthy is the healthy run r is divided by in its "× own healthy"
// figures: the mean of its adjacent baselines' rec/s and p99 when it has
// any, else the table's healthy row of its peer (nil when there is none).
func ownHealthy(r *result, find finder) *result {
	if len(r.adjacent) == 0 {
		return find("healthy", r.p.name)
	}
	m := &result{w: r.adjacent[0].w, p: r.p}
	var p99 time.Duration
	for _, b := range r.adjacent {
		m.recPerSec += b.recPerSec / float64(len(r.adjacent))
		p99 += b.p99 / time.Duration(len(r.adjacent))
	}
	m.p99 = p99
	return m
}

// withOwn is the run of workload wl by peer pn and the healthy run it is
// divided by (ownHealthy); both nil when there is no such run.
func (find finder) withOwn(wl, pn string) (*result, *result) {
	r := find(wl, pn)
	if r == nil {
		return nil, nil
	}
	return r, ownHealthy(r, find)
}

// reportAdjacent prints, for each run with adjacent baselines, those
// baselines and its ratios against them and against the table's healthy
// row, so that a switch of the machine's speed inside a pair shows.
func reportAdjacent(out io.Writer, rs []*result, find finder) {
	var lines []string
	for _, r := range rs {
		if !r.bracketed || r.err != nil {
			continue
		}
		var rates, p99s []string
		for _, b := range r.adjacent {
			rates = append(rates, fmt.Sprintf("%.0f", b.recPerSec))
			p99s = append(p99s, ms(b.p99))
		}
		own, row := ownHealthy(r, find), find("healthy", r.p.name)
		l := fmt.Sprintf("      %-9s %-12s %d healthy neighbours: %s rec/s, p99 %s", r.w.name, r.p.name, len(r.adjacent),
			strings.Join(rates, ", "), strings.Join(p99s, ", "))
		if r.unusable > 0 {
			l += fmt.Sprintf(" (%d more failed or did not finish: not counted)", r.unusable)
		}
		if own != nil && len(r.adjacent) > 0 {
			l += fmt.Sprintf("; healthy-key rec/s %s, p99 %s", ratio(r.healthyPerSec, own.recPerSec), ratio(float64(r.p99), float64(own.p99)))
		}
		if row != nil {
			l += fmt.Sprintf(" (against the table's healthy row: %s, p99 %s)", ratio(r.healthyPerSec, row.recPerSec), ratio(float64(r.p99), float64(row.p99)))
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(out, "\n    adjacent healthy runs (schedule.go; the \"×own healthy\" figures, ratios and targets of these rows divide by their mean):")
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
}
