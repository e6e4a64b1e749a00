package dlq_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/internal/testlog"
)

// A discard without a reason is refused naming the JSON field, and the log
// says it was refused, why, and never that it was requested or started; an
// accepted discard logs the effective rate (the default, 10/s, when the
// request has none) and its reason.
func TestAdminAPILogsRefusalsRateAndReason(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 2)
	var logs testlog.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := dlq.NewServer(ctx, []string{e.plan.Source}, map[string]*dlq.Client{e.plan.Source: c}, testToken,
		slog.New(slog.NewTextHandler(&logs, nil)), "test")
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
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
}
