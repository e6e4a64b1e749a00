package dlq

import (
	"net/http/httptest"
	"testing"
)

// Who asked reads once as the admin API, with the client's host and not
// its ephemeral port (newcomer walk: "admin-api (admin API from
// 127.0.0.1:36310)").
func TestRequester(t *testing.T) {
	r := httptest.NewRequest("POST", "/api/topics/orders/redrive", nil)
	r.RemoteAddr = "127.0.0.1:36310"
	if got, want := requester(r, ""), "admin API from 127.0.0.1"; got != want {
		t.Errorf("no name: %q, want %q", got, want)
	}
	if got, want := requester(r, "alice"), "alice (admin API from 127.0.0.1)"; got != want {
		t.Errorf("JSON by: %q, want %q", got, want)
	}
	r.Header.Set("X-Kretry-By", "bob")
	if got, want := requester(r, ""), "bob (admin API from 127.0.0.1)"; got != want {
		t.Errorf("header: %q, want %q", got, want)
	}
	if got, want := requester(r, "alice"), "alice (admin API from 127.0.0.1)"; got != want {
		t.Errorf("JSON by beside the header: %q, want %q", got, want)
	}
}
