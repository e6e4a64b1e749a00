package main

import (
	"strings"
	"testing"
)

// TestDeepRunsFollowTheTable checks where the deep blocks (marked +) go:
// after the table and its adjacent blocks, one per kretry peer, healthy
// around each of slow-key and 1%-keys; not for the other peers, and not
// at all without the healthy workload or when off.
func TestDeepRunsFollowTheTable(t *testing.T) {
	ps := peersNamed("watermill", "kretry")
	got := stepNames(schedule(workloads, ps, true, true))
	want := "healthy/kretry* failures/kretry healthy/kretry* slow-key/kretry healthy/kretry* " +
		"healthy/kretry*+ slow-key/kretry+ healthy/kretry*+ 1%-keys/kretry+ healthy/kretry*+"
	if !strings.HasSuffix(got, want) {
		t.Errorf("deep on:\n got %s\nwant it to end with %s", got, want)
	}
	if strings.Contains(got, "watermill+") || strings.Contains(got, "watermill*") {
		t.Errorf("a peer that is not kretry got extra runs: %s", got)
	}
	if got := stepNames(schedule(workloads, ps, false, false)); strings.Contains(got, "+") {
		t.Errorf("deep off, yet deep runs scheduled: %s", got)
	}
	if got := stepNames(schedule(workloads[1:], ps, false, true)); strings.Contains(got, "+") {
		t.Errorf("no healthy workload selected, yet deep runs scheduled: %s", got)
	}
	if got := stepNames(schedule(workloads[:2], ps, false, true)); strings.Contains(got, "+") {
		t.Errorf("neither slow-key nor 1%%-keys selected, yet deep runs scheduled: %s", got)
	}
}

// TestDeepRunsAreDividedByDeepNeighbours links the runs of a whole
// schedule, adjacent and deep blocks both, and checks that a deep run is
// divided by the mean of its deep neighbours only (never by an adjacent
// healthy run of the table's depth, even one right before it), that deep
// runs leave the table, and that the slow-key target takes the deep run.
func TestDeepRunsAreDividedByDeepNeighbours(t *testing.T) {
	var rs []*result
	for _, st := range schedule(workloads, peersNamed("kretry"), true, true) {
		r := &result{w: st.w, p: st.p, bracketed: st.bracketed, adjacentHealthy: st.adjacentHealthy, deep: st.deep,
			recPerSec: 1000, healthyPerSec: 900, p99: 1, drainComplete: true, pacedComplete: true}
		if st.deep {
			r.backlog = 100000
			if st.adjacentHealthy {
				r.recPerSec = 2000
			}
		}
		rs = append(rs, r)
	}
	linkBaselines(rs)
	deep := deepRuns(rs)
	for _, wl := range deepWorkloads {
		a, b := deepOwn(deep, wl, "kretry")
		if a == nil || len(a.adjacent) != 2 || b.recPerSec != 2000 {
			t.Fatalf("%s deep run: got %v and own %v, want it linked to its two deep neighbours (2000 rec/s)", wl, a, b)
		}
	}
	for _, r := range tableRows(rs) {
		if r.deep {
			t.Errorf("deep run %s/%s has a table row", r.w.name, r.p.name)
		}
	}
	kr, h, sk := peersNamed("kretry")[0], workloads[0], workloads[2]
	shallow := &result{w: h, p: kr, adjacentHealthy: true, recPerSec: 1, p99: 1, drainComplete: true, pacedComplete: true}
	lone := &result{w: sk, p: kr, bracketed: true, deep: true}
	after := &result{w: h, p: kr, adjacentHealthy: true, deep: true, recPerSec: 3000, p99: 1, drainComplete: true, pacedComplete: true}
	linkBaselines([]*result{shallow, lone, after})
	if len(lone.adjacent) != 1 || lone.adjacent[0] != after {
		t.Errorf("a deep run next to a healthy run of the table's depth was linked to %d runs, want only the deep one after it", len(lone.adjacent))
	}
	var out strings.Builder
	find := func(wl, pn string) *result {
		for _, r := range tableRows(rs) {
			if r.w.name == wl && r.p.name == pn {
				return r
			}
		}
		return nil
	}
	reportTargets(&out, find, deep, nil)
	if !strings.Contains(out.String(), "slow key: kretry other keys' rec/s ≥ 0.95× no-slow-key run, 100000 records") ||
		!strings.Contains(out.String(), "0.45×") {
		t.Errorf("the slow-key target does not take the deep run (900 / 2000 = 0.45×):\n%s", out.String())
	}
}
