package dlq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
)

const testToken = "0123456789abcdef-test"

// apiEnv is an env with four dead-lettered records, a forged one, and the
// admin API over it.
func apiEnv(t *testing.T) (*env, *httptest.Server) {
	t.Helper()
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	deadLetter(t, e, c, 4)
	e.produce(&kgo.Record{Topic: e.plan.DLQ, Partition: 1, Key: []byte{0, 0xfe}, Value: []byte{0xff, 0, 1},
		Headers: []kgo.RecordHeader{{Key: "kretry-attempt", Value: []byte(`<img src=x onerror="window.__xss=1">`)}, {Key: "\xff", Value: nil}}})
	e.waitDLQ(c, 5)
	return e, serveAPI(t, e, c, testLogger(t))
}

// serveAPI serves the admin API over c, the DLQ of e's source, logging to
// log, until the test ends.
func serveAPI(t *testing.T, e *env, c *dlq.Client, log *slog.Logger) *httptest.Server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := dlq.NewServer(ctx, []string{e.plan.Source}, map[string]*dlq.Client{e.plan.Source: c}, testToken, log, "test")
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, srv *httptest.Server, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, srv.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("X-Kretry-By", "api-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestAdminAPI(t *testing.T) {
	e, srv := apiEnv(t)
	src := e.plan.Source
	// Bad or missing token: 401, and nothing changes.
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		code, b := call(t, srv, "POST", "/api/topics/"+src+"/redrive", tok, map[string]any{})
		if code != http.StatusUnauthorized {
			t.Fatalf("token %q: %d, want 401", tok, code)
		}
		if !strings.Contains(string(b), "Bearer <admin.token>") { // as written, not \u003c
			t.Errorf("token %q: body %s, want it to name Bearer <admin.token>", tok, b)
		}
	}
	var list struct {
		Total   int
		Records []dlq.EntryJSON
	}
	code, b := call(t, srv, "GET", "/api/topics/"+src+"/records", testToken, nil)
	if err := json.Unmarshal(b, &list); code != 200 || err != nil || list.Total != 5 {
		t.Fatalf("list: %d %v %s", code, err, b)
	}
	// Filter: the forged record is the only unreadable one, shown safely.
	code, b = call(t, srv, "GET", "/api/topics/"+src+"/records?class=unreadable", testToken, nil)
	if err := json.Unmarshal(b, &list); code != 200 || err != nil || list.Total != 1 || list.Records[0].Problem == "" || list.Records[0].KeyB64 == nil {
		t.Fatalf("unreadable: %d %v %s", code, err, b)
	}
	forged := list.Records[0].Record
	code, b = call(t, srv, "GET", "/api/topics/"+src+"/records/"+forged, testToken, nil)
	var full dlq.EntryJSON
	if err := json.Unmarshal(b, &full); code != 200 || err != nil || full.ValueB64 == nil || len(full.Headers) != 2 || full.Headers[1].Key != "\ufffd" {
		t.Fatalf("show forged: %d %v %s", code, err, b)
	}
	code, b = call(t, srv, "GET", "/api/topics/"+src+"/records?status=abc", testToken, nil)
	if code != 400 || !strings.Contains(string(b), `status \"abc\"`) {
		t.Fatalf("bad filter: %d %s", code, b)
	}
	// Redrive two records and the forged one: 202, the two delivered, the
	// forged one refused with its reason.
	code, b = call(t, srv, "GET", "/api/topics/"+src+"/records?class=permanent&limit=2", testToken, nil)
	if err := json.Unmarshal(b, &list); code != 200 || err != nil || len(list.Records) != 2 {
		t.Fatalf("two: %d %v %s", code, err, b)
	}
	pick := []string{list.Records[0].Record, list.Records[1].Record, forged}
	code, b = call(t, srv, "POST", "/api/topics/"+src+"/redrive", testToken, map[string]any{"filter": map[string]any{"records": pick}, "rate": 50})
	var op struct {
		Op, State string
		Result    *dlq.Result
	}
	if err := json.Unmarshal(b, &op); code != http.StatusAccepted || err != nil || op.Op == "" {
		t.Fatalf("redrive: %d %v %s", code, err, b)
	}
	eventually(t, "the operation done", func() bool {
		_, b := call(t, srv, "GET", "/api/ops/"+op.Op, testToken, nil)
		_ = json.Unmarshal(b, &op)
		return op.State != "running"
	})
	if op.State != "done" || op.Result.Moved != 2 || len(op.Result.Refused) != 1 || !strings.Contains(op.Result.Refused[0].Reason, "kretry headers missing") {
		t.Fatalf("operation: %+v %+v", op, op.Result)
	}
	// Cancelling an operation that has ended: 409, its state unchanged.
	if code, b = call(t, srv, "POST", "/api/ops/"+op.Op+"/cancel", testToken, nil); code != http.StatusConflict || !strings.Contains(string(b), "already ended (done)") {
		t.Fatalf("cancel of an ended operation: %d %s, want 409", code, b)
	}
	eventually(t, "two redriven deliveries", func() bool { return len(e.app.redriven()) == 2 })
	code, b = call(t, srv, "GET", "/api/topics/"+src+"/stats", testToken, nil)
	var st dlq.Stats
	if err := json.Unmarshal(b, &st); code != 200 || err != nil || st.Waiting != 3 || st.Redriven != 2 {
		t.Fatalf("stats: %d %v %s", code, err, b)
	}
	// A discard needs a reason; an unknown field is refused.
	if code, b = call(t, srv, "POST", "/api/topics/"+src+"/discard", testToken, map[string]any{}); code != 400 || !strings.Contains(string(b), "reason") {
		t.Fatalf("discard without reason: %d %s", code, b)
	}
	if code, b = call(t, srv, "POST", "/api/topics/"+src+"/discard", testToken, map[string]any{"reason": "x", "dryrun": true}); code != 400 || !strings.Contains(string(b), "unknown field") {
		t.Fatalf("unknown field: %d %s", code, b)
	}
	if code, _ = call(t, srv, "GET", "/api/topics/payments/stats", testToken, nil); code != 404 {
		t.Fatalf("unknown topic: %d", code)
	}
	// The page is served without a token; it holds no data.
	if code, b = call(t, srv, "GET", "/", "", nil); code != 200 || !bytes.Contains(b, []byte("<title>")) {
		t.Fatalf("page: %d", code)
	}
}

// A Server built with an empty token authorises nobody, not even
// "Authorization: Bearer " with nothing after it (kretry run refuses to
// start without a token; this is the defence behind that).
func TestAdminAPIWithoutTokenRefusesAll(t *testing.T) {
	srv := httptest.NewServer(dlq.NewServer(context.Background(), nil, nil, "", testLogger(t), "test").Handler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL+"/api/topics", nil)
	req.Header.Set("Authorization", "Bearer ")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("empty bearer token against a server without a token: %d, want 401", resp.StatusCode)
	}
}
