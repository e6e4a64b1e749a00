package dlq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kretry/kretry/dlq"
)

// logBuffer is a bytes.Buffer safe for the server's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the log lines holding msg.
func (b *logBuffer) lines(msg string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for l := range strings.Lines(b.buf.String()) {
		if strings.Contains(l, msg) {
			out = append(out, l)
		}
	}
	return out
}

// A discard without a reason is refused naming the JSON field, and the log
// says it was refused, why, and never that it was requested or started; an
// accepted discard logs the effective rate (the default, 10/s, when the
// request has none) and its reason.
func TestAdminAPILogsRefusalsRateAndReason(t *testing.T) {
	e := newEnv(t, 2, 50*time.Millisecond)
	c := e.client()
	snap := deadLetter(t, e, c, 2)
	var logs logBuffer
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
	if l := logs.lines("operation refused"); len(l) != 1 || !strings.Contains(l[0], "status=400") || !strings.Contains(l[0], `JSON field \"reason\"`) {
		t.Fatalf("refusal log lines: %q, want one with status=400 and the reason", l)
	}
	if l := append(logs.lines("operation requested"), logs.lines("operation started")...); len(l) != 0 {
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
	started := logs.lines("admin API: operation started")
	if len(started) != 1 || !strings.Contains(started[0], "rate=10 ") || !strings.Contains(started[0], `reason="duplicate of order 7"`) || !strings.Contains(started[0], "op="+op.Op) {
		t.Fatalf("started log lines: %q, want one with op=%s rate=10 and the reason", started, op.Op)
	}
}
