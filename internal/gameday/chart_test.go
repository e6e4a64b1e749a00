package gameday

import (
	"html"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSecondsTicks: the time axis is marked in whole seconds at a round
// step, at most 8 marks, whatever the run's length.
func TestSecondsTicks(t *testing.T) {
	for _, tc := range []struct {
		max  float64
		want []string
	}{
		{28.7, []string{"0", "5", "10", "15", "20", "25"}},
		{21.4, []string{"0", "5", "10", "15", "20"}},
		{6.5, []string{"0", "1", "2", "3", "4", "5", "6"}},
		{190, []string{"0", "30", "60", "90", "120", "150", "180"}},
	} {
		var got []string
		for _, tk := range (secondsTicks{}).Ticks(0, tc.max) {
			got = append(got, tk.Label)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("ticks of a %gs axis: %q, want %q", tc.max, got, tc.want)
		}
	}
}

// TestVerdictWithoutKretry: a game day of the blocking peer alone
// (--peers blocking) has no kretry check to fail: it exits 0 and says so,
// rather than "FAILED: kretry checks" with none named.
func TestVerdictWithoutKretry(t *testing.T) {
	r := &Report{Started: time.Now(), Peers: []*PeerReport{{Peer: "blocking", OK: false}}}
	r.finish()
	if !r.OK {
		t.Error("Report.OK false with no kretry peer: the exit status would be 1")
	}
	var out strings.Builder
	r.Print(&out)
	if !strings.Contains(out.String(), notRun) || !strings.Contains(string(Chart(r)), html.EscapeString(notRun)) {
		t.Errorf("the report and chart do not say kretry did not run:\n%s", out.String())
	}
	r.Peers = append(r.Peers, &PeerReport{Peer: "kretry", OK: false}, &PeerReport{Peer: "kretry", OK: true})
	r.finish()
	if r.OK {
		t.Error("Report.OK true with a failed kretry run (the first of two)")
	}
}
