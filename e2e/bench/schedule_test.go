package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func stepNames(steps []step) string {
	var b []string
	for _, s := range steps {
		n := s.w.name + "/" + s.p.name
		if s.adjacentHealthy {
			n += "*"
		}
		if s.deep {
			n += "+"
		}
		b = append(b, n)
	}
	return strings.Join(b, " ")
}

func peersNamed(names ...string) []*peer {
	var ps []*peer
	for _, n := range names {
		for _, p := range peers {
			if p.name == n {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// TestScheduleBracketsAdjacentRuns checks the order schedule gives: the
// failures and slow-key runs of kretry and kretry-http leave the
// workload-major order for blocks of healthy baselines (marked *) around
// them; the other peers keep theirs; off, the order is workload-major.
func TestScheduleBracketsAdjacentRuns(t *testing.T) {
	ws := workloads[:3] // healthy, failures, slow-key
	ps := peersNamed("watermill", "kretry", "kretry-http")
	got := stepNames(schedule(ws, ps, true, false))
	want := "healthy/watermill healthy/kretry healthy/kretry-http failures/watermill slow-key/watermill " +
		"healthy/kretry* failures/kretry healthy/kretry* slow-key/kretry healthy/kretry* " +
		"healthy/kretry-http* failures/kretry-http healthy/kretry-http* slow-key/kretry-http healthy/kretry-http*"
	if got != want {
		t.Errorf("adjacent on:\n got %s\nwant %s", got, want)
	}
	got = stepNames(schedule(ws, ps, false, false))
	want = "healthy/watermill healthy/kretry healthy/kretry-http failures/watermill failures/kretry failures/kretry-http " +
		"slow-key/watermill slow-key/kretry slow-key/kretry-http"
	if got != want {
		t.Errorf("adjacent off:\n got %s\nwant %s", got, want)
	}
	// Without the healthy workload there is nothing to bracket with.
	got = stepNames(schedule(workloads[1:3], ps, true, false))
	if strings.Contains(got, "*") {
		t.Errorf("no healthy workload selected, yet baselines scheduled: %s", got)
	}
}

// TestOwnHealthyIsTheMeanOfTheAdjacentRuns runs linkBaselines over a block
// as runTable records it and checks which healthy figures each run is
// divided by: the mean of the baselines on both sides, only the peer's
// own, none across a failed baseline, and the table's row without any.
func TestOwnHealthyIsTheMeanOfTheAdjacentRuns(t *testing.T) {
	h, f, s := workloads[0], workloads[1], workloads[2]
	kr := peersNamed("kretry")[0]
	base := func(rate float64, p99 time.Duration) *result {
		return &result{w: h, p: kr, adjacentHealthy: true, recPerSec: rate, p99: p99, drainComplete: true, pacedComplete: true}
	}
	row := &result{w: h, p: kr, recPerSec: 1000, p99: 10 * time.Millisecond}
	fr := &result{w: f, p: kr, bracketed: true, healthyPerSec: 27000, p99: 3 * time.Millisecond}
	sr := &result{w: s, p: kr, bracketed: true, healthyPerSec: 27000}
	failedBase := base(30000, time.Millisecond)
	failedBase.err = fmt.Errorf("broker gone")
	all := []*result{row, base(30000, 2*time.Millisecond), fr, base(20000, 4*time.Millisecond), sr, failedBase}
	linkBaselines(all)
	find := func(wl, pn string) *result {
		for _, r := range tableRows(all) {
			if r.w.name == wl && r.p.name == pn && r.err == nil {
				return r
			}
		}
		return nil
	}
	if got := ownHealthy(fr, find); got.recPerSec != 25000 || got.p99 != 3*time.Millisecond {
		t.Errorf("failures run: own healthy %.0f rec/s p99 %v, want the mean of its neighbours, 25000 and 3ms", got.recPerSec, got.p99)
	}
	if got := ownHealthy(sr, find); len(sr.adjacent) != 1 || sr.unusable != 1 || got.recPerSec != 20000 {
		t.Errorf("slow-key run: %d adjacent, %d unusable, own healthy %.0f rec/s; want only the baseline before it (the one after failed), 20000", len(sr.adjacent), sr.unusable, got.recPerSec)
	}
	undrained := base(30000, time.Millisecond)
	undrained.drainComplete = false
	lone := &result{w: s, p: kr, bracketed: true, healthyPerSec: 27000}
	linkBaselines([]*result{undrained, lone})
	if len(lone.adjacent) != 0 || lone.unusable != 1 {
		t.Errorf("a healthy run that did not drain its backlog was lent: %d adjacent, %d unusable", len(lone.adjacent), lone.unusable)
	}
	if got := ownHealthy(row, find); got != row {
		t.Errorf("a run without baselines is divided by %+v, want the table's healthy row", got)
	}
	if rows := tableRows(all); len(rows) != 3 || rows[0] != row || rows[1] != fr || rows[2] != sr {
		t.Errorf("table rows: got %d rows, want the healthy row, failures, slow-key in workload order", len(rows))
	}
}

// TestOnlyBracketedRunsGetBaselines runs the whole table's schedule for
// one kretry peer, where the 1%-keys run ends the workload-by-workload part
// right before the first adjacent healthy run, and checks that only the
// failures and slow-key runs are linked.
func TestOnlyBracketedRunsGetBaselines(t *testing.T) {
	for _, pn := range adjacentPeers {
		var rs []*result
		for _, st := range schedule(workloads, peersNamed(pn), true, false) {
			rs = append(rs, &result{w: st.w, p: st.p, bracketed: st.bracketed, adjacentHealthy: st.adjacentHealthy,
				recPerSec: 1, p99: 1, drainComplete: true, pacedComplete: true})
		}
		linkBaselines(rs)
		for _, r := range rs {
			want := 0
			if r.w.name == "failures" || r.w.name == "slow-key" {
				want = 2
			}
			if len(r.adjacent) != want {
				t.Errorf("%s %s: %d adjacent healthy runs, want %d", pn, r.w.name, len(r.adjacent), want)
			}
		}
	}
}
