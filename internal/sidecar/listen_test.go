package sidecar

import (
	"net"
	"strings"
	"testing"
)

// TestListenInUseSaysHowToMoveAside: a second instance on the same host
// binds the first one's metrics address; the error names the key, the
// environment variable that overrides it and what to do.
func TestListenInUseSaysHowToMoveAside(t *testing.T) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = listen("metrics.listen", first.Addr().String())
	if err == nil {
		t.Fatal("a second listener on the same address started")
	}
	for _, want := range []string{"metrics.listen " + first.Addr().String(), "address already in use", "KRETRY_METRICS__LISTEN=<host:port>"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	_, err = listen("admin.listen", "127.0.0.1:notaport")
	if err == nil || !strings.HasPrefix(err.Error(), "admin.listen 127.0.0.1:notaport: ") || strings.Contains(err.Error(), "another process") {
		t.Errorf("a bad address: %v; want it named, without the address-in-use advice", err)
	}
}
