package dlq_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/internal/testlog"
)

// A discard without a reason is refused naming the JSON field, and the log
// says it was refused, why, and never that it was requested or started; an
// accepted discard logs the effective rate (the default, 10/s, when the
// request has none) and its reason, and its end without an empty error.
func TestAdminAPILogsRefusalsRateAndReason(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	var logs testlog.Buffer
	c := e.client(dlq.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	snap := deadLetter(t, e, c, 2)
	srv := serveAPI(t, e, c, slog.New(slog.NewTextHandler(&logs, nil)))
	path := "/api/topics/" + e.plan.Source + "/discard"

	code, b := call(t, srv, "POST", path, testToken, map[string]any{"filter": map[string]any{"records": []string{snap.Entries[0].Ref()}}})
	if code != http.StatusBadRequest || !strings.Contains(string(b), `JSON field \"reason\"`) {
		t.Fatalf("discard without reason: %d %s, want 400 naming the JSON field \"reason\"", code, b)
	}
	if l := logs.Lines("operation refused"); len(l) != 1 || !strings.Contains(l[0], "status=400") || !strings.Contains(l[0], `JSON field \"reason\"`) {
		t.Fatalf("refusal log lines: %q, want one with status=400 and the reason", l)
	}
	if l := append(logs.Lines("operation requested"), logs.Lines("operation started")...); len(l) != 0 {
		t.Fatalf("a refused request logged as requested or started: %q", l)
	}

	code, b = call(t, srv, "POST", path, testToken, map[string]any{"filter": map[string]any{"records": []string{snap.Entries[0].Ref()}}, "reason": "duplicate of order 7"})
	var op struct{ Op, State string }
	if err := json.Unmarshal(b, &op); code != http.StatusAccepted || err != nil {
		t.Fatalf("discard: %d %v %s", code, err, b)
	}
	eventually(t, "the discard done", func() bool {
		_, b := call(t, srv, "GET", "/api/ops/"+op.Op, testToken, nil)
		_ = json.Unmarshal(b, &op)
		return op.State != "running"
	})
	started := logs.Lines("admin API: operation started")
	if len(started) != 1 || !strings.Contains(started[0], "rate=10 ") || !strings.Contains(started[0], `reason="duplicate of order 7"`) || !strings.Contains(started[0], "op="+op.Op) {
		t.Fatalf("started log lines: %q, want one with op=%s rate=10 and the reason", started, op.Op)
	}
	eventually(t, "the end logged", func() bool { return len(logs.Lines("admin API: operation ended")) == 1 })
	for _, msg := range []string{"admin API: operation ended", "dlq operation ended"} {
		if l := logs.Lines(msg); len(l) != 1 || !strings.Contains(l[0], "moved=1 ") || strings.Contains(l[0], "err") {
			t.Errorf("%q lines: %q, want one with moved=1 and no err=<nil> or error=\"\"", msg, l)
		}
	}
}

// Every refused move is logged, also a body that does not parse and a bad
// rate, and the answer is in the API's words (the field, what it wants,
// what it got), not Go's unmarshal message; a bad query of a read is
// logged too.
func TestAdminAPILogsEveryRefusalInItsOwnWords(t *testing.T) {
	e := newEnv(t, 1, 50*time.Millisecond)
	c := e.client()
	deadLetter(t, e, c, 1)
	var logs testlog.Buffer
	srv := serveAPI(t, e, c, slog.New(slog.NewTextHandler(&logs, nil)))
	path := "/api/topics/" + e.plan.Source + "/redrive"
	for _, tc := range []struct{ body, want string }{
		{`{"rate":"fast"}`, `rate: want a number of records per second, got \"fast\"`},
		{`{"limit":"all"}`, `limit: want a whole number of records (0: all), got \"all\"`},
		{`{"filter":{"status":["503"]}}`, `filter.status: want a list of HTTP statuses such as [422, 503], got [\"503\"]`},
		{`{"dry_run":"yes"}`, `dry_run: want true or false, got \"yes\"`},
		{`{"rate":`, `request body: the JSON ends too early`},
		{`not json`, `request body: not JSON (at byte 2)`},
		{`[1]`, `request body: want a JSON object, got a JSON array`},
		{``, `request body is empty`},
		{`{"speed":5}`, `request body: unknown field \"speed\": a redrive or discard request has filter, limit, rate`},
		{`{"filter":{"clas":["permanent"]},"dry_run":true}`, `request body: unknown field \"clas\" in filter: a filter has state, class, status`},
		{`{"rate":-1}`, `rate -1: want records/s above 0`},
		{`{"rate":0.001}`, `rate 0.001 records/s is below the floor`},
	} {
		before := len(logs.Lines("admin API: operation refused"))
		code, b := rawCall(t, srv, "POST", path, testToken, strings.NewReader(tc.body))
		if code != http.StatusBadRequest || !strings.Contains(b, tc.want) || strings.Contains(b, "json:") || strings.Contains(b, "Go ") {
			t.Errorf("body %s: %d %s, want 400 with %s", tc.body, code, b, tc.want)
		}
		l := logs.Lines("admin API: operation refused")
		said, _, _ := strings.Cut(tc.want, `\"`) // the log quotes quotes again
		if len(l) != before+1 || !strings.Contains(l[len(l)-1], "status=400") || !strings.Contains(l[len(l)-1], "action=redriven") || !strings.Contains(l[len(l)-1], said) {
			t.Errorf("body %s: refusal log lines %q, want one more with status=400, action=redriven and the error", tc.body, l[before:])
		}
	}
	code, b := rawCall(t, srv, "GET", "/api/topics/"+e.plan.Source+"/records?status=abc", testToken, nil)
	if l := logs.Lines("admin API: request refused"); code != http.StatusBadRequest || len(l) != 1 || !strings.Contains(l[0], `status \"abc\"`) {
		t.Errorf("GET with a bad status: %d %s, log lines %q, want 400 and one refusal line naming the status", code, b, l)
	}
}
