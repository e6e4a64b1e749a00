package config

import "testing"

// TestSameListen: two listen addresses collide on the same non-zero port
// when their hosts are the same or either takes every address.
func TestSameListen(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:9464", "127.0.0.1:9464", true},
		{"localhost:9464", "127.0.0.1:9464", true},
		{":9464", "10.0.0.5:9464", true},
		{"[::]:9464", "127.0.0.1:9464", true},
		{"127.0.0.1:9464", "127.0.0.1:9465", false},
		{"127.0.0.1:9464", "10.0.0.5:9464", false},
		{"127.0.0.1:0", "127.0.0.1:0", false}, // each gets its own port
		{"not an address", "127.0.0.1:9464", false},
	} {
		if got := sameListen(tc.a, tc.b); got != tc.want {
			t.Errorf("sameListen(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
