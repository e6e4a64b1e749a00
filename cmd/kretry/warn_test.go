package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// renamed is a config whose topic was renamed from orders to payments
// while the derived names stayed written out.
const renamed = `
kafka: {brokers: ["127.0.0.1:1"]}
app: {url: http://127.0.0.1:8080/kafka}
metrics: {listen: ""}
topics:
  - name: payments
    group: orders-kretry
    dlq: {topic: orders.dlq}
`

// TestRenameWarning: validate and run warn about a group or DLQ named for
// another topic; validate still exits 0.
func TestRenameWarning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, path, renamed)
	want := []string{
		`topics[0].group: "orders-kretry" is topic "orders"'s default name, but this is topic "payments"`,
		`topics[0].dlq.topic: "orders.dlq" is topic "orders"'s default name`,
	}

	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"validate", "-c", path}, &out, &errb); code != exitOK {
		t.Fatalf("validate: exit %d: %s", code, errb.String())
	}
	for _, w := range want {
		if !strings.Contains(errb.String(), "kretry validate: warning: "+w) {
			t.Errorf("validate stderr lacks %q:\n%s", w, errb.String())
		}
	}
	if !strings.Contains(out.String(), "OK") {
		t.Errorf("validate stdout %q lacks OK", out.String())
	}

	// run warns at start, before it fails to reach the broker.
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"run", "-c", path}, &out, &errb); code != exitFail {
		t.Errorf("run against no broker: exit %d, want %d", code, exitFail)
	}
	for _, w := range want {
		if !strings.Contains(errb.String(), "level=WARN") || !strings.Contains(errb.String(), strings.ReplaceAll(w, `"`, `\"`)) {
			t.Errorf("run log lacks a warning %q:\n%s", w, errb.String())
		}
	}
}

// TestValidateRefusesWhatRunRefuses: an admin endpoint without a token
// passes config.Validate (kretry dlq works without it) but not kretry run;
// kretry validate must say so too, naming the key and what to set.
func TestValidateRefusesWhatRunRefuses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, path, renamed+"admin: {enabled: true}\n")
	for _, cmd := range []string{"validate", "run"} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{cmd, "-c", path}, &out, &errb); code != exitUsage {
			t.Errorf("%s: exit %d, want %d (stdout %q)", cmd, code, exitUsage, out.String())
		}
		if !strings.Contains(errb.String(), "admin.token: required when admin.enabled is true") || !strings.Contains(errb.String(), "KRETRY_ADMIN__TOKEN") {
			t.Errorf("%s: stderr does not name admin.token and KRETRY_ADMIN__TOKEN:\n%s", cmd, errb.String())
		}
	}
	t.Setenv("KRETRY_ADMIN__TOKEN", "0123456789abcdef")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"validate", "-c", path}, &out, &errb); code != exitOK {
		t.Errorf("validate with the token set: exit %d: %s", code, errb.String())
	}
}
