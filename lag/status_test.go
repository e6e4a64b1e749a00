package lag_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/kretry/kretry/lag"
)

// window builds samples 10s apart from (committed, lag) pairs.
func window(pairs ...int64) []lag.Sample {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var out []lag.Sample
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, lag.Sample{Time: t0.Add(time.Duration(i/2) * 10 * time.Second), Committed: pairs[i], Lag: pairs[i+1]})
	}
	return out
}

func withErr(s []lag.Sample, i int) []lag.Sample {
	s[i].Err = true
	return s
}

func TestEvaluate(t *testing.T) {
	const w = 4
	f := lag.Facts{Window: w}
	assigned := lag.Facts{Window: w, Assigned: true}
	tier := func(age time.Duration) lag.Facts {
		return lag.Facts{Window: w, Wait: time.Minute, Age: age, AgeKnown: true, Assigned: true}
	}
	for _, tc := range []struct {
		name    string
		samples []lag.Sample
		facts   lag.Facts
		want    lag.Status
	}{
		{"no samples", nil, f, lag.StatusErr},
		{"latest failed", withErr(window(5, 3, 5, 3), 1), f, lag.StatusErr},
		{"caught up", window(10, 0), f, lag.StatusOK},
		{"short history with lag", window(5, 3, 5, 4, 5, 5), f, lag.StatusOK},

		// Idle partition: nothing new, nothing committed, lag 0 throughout:
		// OK however old the commit (Burrow's false STOP).
		{"idle, lag 0", window(7, 0, 7, 0, 7, 0, 7, 0, 7, 0), f, lag.StatusOK},
		// Commits stop while records keep coming: the lag grows with the end
		// offset of each scan, never frozen at the last commit.
		{"stopped, nobody assigned", window(7, 1, 7, 3, 7, 5, 7, 9), f, lag.StatusStop},
		{"stopped, member assigned", window(7, 1, 7, 3, 7, 5, 7, 9), assigned, lag.StatusStall},
		{"stopped with constant lag", window(7, 4, 7, 4, 7, 4, 7, 4), f, lag.StatusStop},
		// Commit stood still, lag appeared only in the last samples: no
		// verdict until the whole window has lag.
		{"lag only lately", window(7, 0, 7, 0, 7, 2, 7, 4), f, lag.StatusOK},
		{"lag in whole window after idle", window(7, 0, 7, 2, 7, 4, 7, 6, 7, 8), f, lag.StatusStop},
		// Retention moves no commit: the raw commit is compared, so a
		// stopped consumer stays STOP.
		{"stopped, commit below log start", window(-1, 5, -1, 5, -1, 6, -1, 6), f, lag.StatusStop},

		{"progressing, lag falls", window(1, 9, 3, 8, 6, 5, 9, 2), f, lag.StatusOK},
		{"progressing, steady lag", window(1, 4, 3, 4, 5, 4, 7, 4), f, lag.StatusOK},
		{"progressing, lag dips once", window(1, 4, 3, 6, 5, 5, 7, 8), f, lag.StatusOK},
		{"falling behind", window(1, 4, 3, 6, 5, 6, 7, 8), f, lag.StatusWarn},
		{"falling behind, window is the last 4", window(9, 100, 1, 4, 3, 6, 5, 6, 7, 8), f, lag.StatusWarn},
		{"error in window", withErr(window(7, 1, 7, 3, 7, 5, 7, 9), 0), f, lag.StatusOK},

		// A retry tier holds records until they are due.
		{"tier waiting", window(3, 2, 3, 2, 3, 2, 3, 2), tier(50 * time.Second), lag.StatusOK},
		{"tier waiting, within grace", window(3, 2, 3, 2, 3, 2, 3, 2), tier(time.Minute + 30*time.Second), lag.StatusOK},
		{"tier overdue", window(3, 2, 3, 2, 3, 2, 3, 2), tier(time.Minute + 31*time.Second), lag.StatusStall},
		{"tier age unknown", window(3, 2, 3, 2, 3, 2, 3, 2), lag.Facts{Window: w, Wait: time.Minute}, lag.StatusOK},
		// A tier taking its first records: the commit moves from none to
		// the first record, which waits out its delay, and the lag grows
		// as more come in. Waiting by design, not falling behind; once its
		// oldest record is overdue, it is.
		{"tier filling", window(-1, 0, 0, 2, 0, 3, 0, 5), tier(50 * time.Second), lag.StatusOK},
		{"tier taking in faster than due", window(3, 4, 5, 6, 7, 6, 9, 8), tier(50 * time.Second), lag.StatusOK},
		{"tier falling behind, overdue", window(3, 4, 5, 6, 7, 6, 9, 8), tier(2 * time.Minute), lag.StatusWarn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lag.Evaluate(tc.samples, tc.facts); got != tc.want {
				t.Errorf("Evaluate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStatusText(t *testing.T) {
	for s := lag.StatusOK; s <= lag.StatusErr; s++ {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back lag.Status
		if err := json.Unmarshal(b, &back); err != nil || back != s {
			t.Errorf("%v: round trip %s → %v, %v", s, b, back, err)
		}
	}
	if got := []string{lag.StatusOK.String(), lag.StatusWarn.String(), lag.StatusStall.String(), lag.StatusStop.String(), lag.StatusErr.String()}; got[0] != "OK" || got[4] != "ERR" || got[2] != "STALL" {
		t.Errorf("names = %q", got)
	}
}

func TestCompute(t *testing.T) {
	for _, tc := range []struct {
		committed, start, end int64
		lag, from             int64
		flags                 lag.Flags
	}{
		{4, 0, 10, 6, 4, lag.Flags{}},
		{10, 0, 10, 0, 10, lag.Flags{}},
		{-1, 0, 10, 10, 0, lag.Flags{NoCommit: true}},
		{-1, 7, 10, 3, 7, lag.Flags{NoCommit: true}},
		{2, 6, 10, 4, 6, lag.Flags{Clamped: true}},
		{25, 0, 10, 0, 10, lag.Flags{PastEnd: true}},
		{-1, 12, 10, 0, 10, lag.Flags{NoCommit: true}}, // log start listed past the end between deletions
		{3, 12, 10, 0, 10, lag.Flags{Clamped: true}},
	} {
		l, from, fl := lag.Compute(tc.committed, tc.start, tc.end)
		if l != tc.lag || from != tc.from || fl != tc.flags {
			t.Errorf("Compute(%d, %d, %d) = %d, %d, %+v; want %d, %d, %+v", tc.committed, tc.start, tc.end, l, from, fl, tc.lag, tc.from, tc.flags)
		}
	}
}
