package dlq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
)

// pageTestDir holds the browser test's package.json, package-lock.json
// (playwright-core pinned) and script.
const pageTestDir = "web/test"

// browserTools returns chromium's path, or skips (fails under CI=true)
// naming what is missing; it runs `npm ci` once when playwright-core is
// not installed yet.
func browserTools(t *testing.T) string {
	t.Helper()
	need := func(what, hint string, err error) {
		if err == nil {
			return
		}
		msg := what + " not found (" + hint + "): " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	_, err := os.Stat(chromium)
	need("chromium", "apt-get install chromium chromium-driver, or set CHROMIUM", err)
	_, err = exec.LookPath("node")
	need("node", "apt-get install nodejs npm", err)
	if _, err := os.Stat(filepath.Join(pageTestDir, "node_modules", "playwright-core")); err != nil {
		_, err = exec.LookPath("npm")
		need("npm", "apt-get install npm", err)
		cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = pageTestDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in dlq/%s: %v\n%s", pageTestDir, err, out)
		}
	}
	return chromium
}

// TestWebPageInChromium: the page lists, filters, shows a hostile record
// as text and redrives two records, which the app then receives; a wrong
// token shows the 401 and changes nothing.
func TestWebPageInChromium(t *testing.T) {
	chromium := browserTools(t)
	e, srv := apiEnv(t)
	// A huge value and a binary key beside the forged record.
	huge := bytes.Repeat([]byte("x"), 900_000)
	e.app.set(rejectAll)
	e.produce(&kgo.Record{Partition: 0, Key: []byte{0xde, 0xad}, Value: huge})
	e.waitDLQ(e.client(), 6)
	e.app.set(nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "page.test.mjs", srv.URL+"/", testToken)
	cmd.Dir = pageTestDir
	cmd.Env = append(os.Environ(), "CHROMIUM="+chromium)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("page test: %v\n%s\n%s", err, out, stderr.String())
	}
	var got struct {
		BadToken                                     string
		RowsWithBadToken, WaitingRows, PermanentRows int
		UnreadableRows                               int
		ForgedDetail                                 string
		XSSRan                                       bool `json:"xssRan"`
		Picked                                       []string
		Status, Progress                             string
		DiscardStatus, CancelStatus, CancelError     string
		DetailAfterDiscard                           string
		RedrivenRows                                 []string
		PageErrors                                   []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("page test output %q: %v", out, err)
	}
	t.Logf("page: %+v", got)
	switch {
	case !strings.Contains(got.BadToken, "401") || got.RowsWithBadToken != 0:
		t.Errorf("wrong token: error %q, %d rows; want a 401 and no rows", got.BadToken, got.RowsWithBadToken)
	case got.WaitingRows != 6 || got.PermanentRows != 5 || got.UnreadableRows != 1:
		t.Errorf("rows: waiting %d, permanent %d, unreadable %d; want 6, 5, 1", got.WaitingRows, got.PermanentRows, got.UnreadableRows)
	case !strings.Contains(got.ForgedDetail, `<img src=x onerror="window.__xss=1">`) || got.XSSRan:
		t.Errorf("forged record detail %q (script ran: %v); want the header shown as text", got.ForgedDetail, got.XSSRan)
	case !strings.Contains(got.Status, "done: moved 2 of 2") || !strings.HasPrefix(got.Progress, "2/2"):
		t.Errorf("status %q, progress %q; want 2 of 2 done", got.Status, got.Progress)
	case !strings.Contains(got.DiscardStatus, "discarded done: moved 1 of 1"):
		t.Errorf("discard status %q, want 1 of 1 done", got.DiscardStatus)
	case !strings.HasSuffix(got.DetailAfterDiscard, "(discarded)"):
		t.Errorf("detail pane after the discard %q, want the record's new state (discarded)", got.DetailAfterDiscard)
	case !strings.Contains(got.CancelStatus, "redriven stopped: moved 1 of 3"):
		t.Errorf("cancelled redrive status %q (error %q), want stopped after 1 of 3", got.CancelStatus, got.CancelError)
	case len(got.PageErrors) > 0:
		t.Errorf("errors in the page: %v", got.PageErrors)
	}
	slices.Sort(got.Picked)
	slices.Sort(got.RedrivenRows)
	if !slices.Equal(got.Picked, got.RedrivenRows) {
		t.Errorf("listed as redriven %v, want the picked %v", got.RedrivenRows, got.Picked)
	}
	// In Kafka: the two picked records, then the one moved before the
	// cancel, reach the app.
	eventually(t, "three redriven deliveries", func() bool { return len(e.app.redriven()) >= 3 })
	snap, err := e.client().Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, en := range snap.Entries {
		if slices.Contains(got.Picked, en.Ref()) {
			want = append(want, en.ID)
		}
	}
	byOp := map[string][]string{} // redrive id → ce-ids
	for _, m := range e.app.redriven() {
		byOp[m.RedriveID] = append(byOp[m.RedriveID], m.ID)
	}
	var ids []string
	for _, g := range byOp {
		if len(g) == 2 { // the two picked; the cancelled redrive moved one
			ids = g
		}
	}
	slices.Sort(want)
	slices.Sort(ids)
	if !slices.Equal(ids, want) {
		t.Fatalf("redriven deliveries %v, want %v", ids, want)
	}
	// The huge record redrives whole (unless the cancelled redrive moved it).
	if _, err := e.client().Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Filter: dlq.Filter{Key: []byte{0xde, 0xad}, HasKey: true}, Rate: -1}); err != nil {
		t.Fatalf("huge record: %v", err)
	}
	eventually(t, "the huge record redelivered", func() bool {
		for _, m := range e.app.redriven() {
			if bytes.Equal(m.Value, huge) {
				return true
			}
		}
		return false
	})
}
