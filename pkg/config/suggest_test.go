package config

import "testing"

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"url", "url", 0},
		{"urll", "url", 1},
		{"retyr", "retry", 1}, // a swap is one edit
		{"max_inflight", "max_in_flight", 1},
		{"kitten", "sitting", 3},
		{"", "abc", 3},
	} {
		if got := EditDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	app := []string{"url", "timeout", "max_in_flight", "ce_type"}
	for key, want := range map[string]string{
		"urll":         "url",
		"URL":          "url",
		"timout":       "timeout",
		"max_inflight": "max_in_flight",
		"maxinflight":  "max_in_flight",
		"type":         "",
		"tls":          "",
		"x":            "",
	} {
		if got := closest(key, app); got != want {
			t.Errorf("closest(%q) = %q, want %q", key, got, want)
		}
	}
}

// TestDaysInHours: a duration in days or weeks is turned into the hours to
// write; anything else, or no finite positive count, gets no such advice.
func TestDaysInHours(t *testing.T) {
	for in, want := range map[string]string{
		"7d": "168h", "1.5d": "36h", "2w": "336h", "1e3d": "24000h", " 1d ": "24h",
		"1.1d": "26h24m", "0.1d": "2h24m", "0.01d": "14m24s", "1e5d": "2400000h",
		"0d": "", "-1d": "", "Infd": "", "NaNd": "", "1e6d": "", "1e300d": "", "1e-9d": "",
		"d": "", "7 d": "", "5x": "", "10s": "",
	} {
		got, ok := DaysInHours(in)
		if got != want || ok != (want != "") {
			t.Errorf("DaysInHours(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}
