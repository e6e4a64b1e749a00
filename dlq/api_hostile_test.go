package dlq_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// rawCall sends body as is.
func rawCall(t *testing.T, srv *httptest.Server, method, path, token string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminAPIRefusesBadRequests: an oversized body (413),
// malformed JSON or trailing data after it, a negative rate or limit
// (400), and a token in the query string instead of the header (401) are
// refused, and nothing moves.
func TestAdminAPIRefusesBadRequests(t *testing.T) {
	e, srv := apiEnv(t)
	src := e.plan.Source
	ends := func() map[string]int64 { return endOffsets(t, e, e.plan.Tiers[0].Topic, e.plan.DLQ) }
	before := ends()
	huge := `{"reason":"x","by":"` + strings.Repeat("a", 11<<20) + `"}`
	for _, action := range []string{"redrive", "discard"} {
		path := "/api/topics/" + src + "/" + action
		code, b := rawCall(t, srv, "POST", path, testToken, strings.NewReader(huge))
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(b, "over 1048576 bytes") {
			t.Errorf("%s with an 11 MB body: %d %.200s, want 413 naming the limit", action, code, b)
		}
		for _, body := range []string{`{"reason":`, `not json`, `{"reason":"x"} {"dry_run":true}`, `{"reason":"x"}garbage`,
			`{"reason":"x","rate":-1}`, `{"reason":"x","limit":-1}`, `{"reason":"x","limit":-1,"dry_run":true}`} {
			if code, b := rawCall(t, srv, "POST", path, testToken, strings.NewReader(body)); code != http.StatusBadRequest {
				t.Errorf("%s with body %s: %d %s, want 400", action, body, code, b)
			}
		}
		// rate 0 is the documented default (MoveRequest.Rate), not "none".
		if code, b := rawCall(t, srv, "POST", path, testToken, strings.NewReader(`{"reason":"x","rate":0,"dry_run":true}`)); code != http.StatusOK {
			t.Errorf("%s dry run with rate 0: %d %s, want 200", action, code, b)
		}
	}
	for _, q := range []string{"?token=" + testToken, "?access_token=" + testToken, "?authorization=Bearer+" + testToken} {
		if code, _ := rawCall(t, srv, "GET", "/api/topics/"+src+"/stats"+q, "", nil); code != http.StatusUnauthorized {
			t.Errorf("token in the query %s: %d, want 401", q, code)
		}
		if code, _ := rawCall(t, srv, "POST", "/api/topics/"+src+"/discard"+q, "", strings.NewReader(`{"reason":"x"}`)); code != http.StatusUnauthorized {
			t.Errorf("discard with the token in the query %s: %d, want 401", q, code)
		}
	}
	if code, b := rawCall(t, srv, "GET", "/api/ops", testToken, nil); code != 200 || strings.TrimSpace(b) != "[]" {
		t.Errorf("operations after refused requests: %d %s, want none", code, b)
	}
	if after := ends(); !mapsEqual(before, after) {
		t.Fatalf("refused requests wrote: end offsets %v, then %v", before, after)
	}
	code, b := rawCall(t, srv, "GET", "/api/topics/"+src+"/stats", testToken, nil)
	if code != 200 || !strings.Contains(b, `"waiting":5`) {
		t.Fatalf("stats after refused requests: %d %s, want 5 waiting", code, b)
	}
}

// TestAdminAPIRefusesARecordOutsideTheDLQ: a record reference to a
// partition the DLQ does not have, or past a partition's end, is a 400 for
// a move (dry run or not) and a 404 for GET, in the words of kretry dlq,
// naming the partition and what the DLQ holds; nothing moves.
func TestAdminAPIRefusesARecordOutsideTheDLQ(t *testing.T) {
	e, srv := apiEnv(t)
	src := e.plan.Source
	before := endOffsets(t, e, e.plan.Tiers[0].Topic, e.plan.DLQ)
	for _, c := range []struct{ ref, want string }{
		{"9/9", e.plan.DLQ + " has no partition 9: it has 2 partitions (0 to 1)"},
		{"1/999", "partition 1 of " + e.plan.DLQ + " holds offsets 0 to"},
	} {
		want := "record " + c.ref + ": " + c.want
		for _, body := range []string{`{"filter":{"records":["` + c.ref + `"]},"reason":"x"}`, `{"filter":{"records":["` + c.ref + `"]},"reason":"x","dry_run":true}`} {
			for _, action := range []string{"redrive", "discard"} {
				code, b := rawCall(t, srv, "POST", "/api/topics/"+src+"/"+action, testToken, strings.NewReader(body))
				if code != http.StatusBadRequest || !strings.Contains(b, want) {
					t.Errorf("%s %s: %d %s, want 400 with %q", action, body, code, b, want)
				}
			}
		}
		code, b := rawCall(t, srv, "GET", "/api/topics/"+src+"/records/"+c.ref, testToken, nil)
		if code != http.StatusNotFound || !strings.Contains(b, want) {
			t.Errorf("GET record %s: %d %s, want 404 with %q", c.ref, code, b, want)
		}
	}
	if after := endOffsets(t, e, e.plan.Tiers[0].Topic, e.plan.DLQ); !mapsEqual(before, after) {
		t.Fatalf("refused requests wrote: end offsets %v, then %v", before, after)
	}
}
