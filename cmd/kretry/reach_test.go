package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestNoBroker: with no broker up, run, lag and parking release say once
// which address failed, from which config key, and what to do.
func TestNoBroker(t *testing.T) {
	addr := deadAddr(t)
	embedded := filepath.Join(t.TempDir(), "embedded.yaml")
	writeFile(t, embedded, fmt.Sprintf("embedded: {listen: %q}\napp: {url: http://127.0.0.1:8080/kafka}\nmetrics: {listen: \"\"}\ntopics: [{name: orders}]\n", addr))
	remote := filepath.Join(t.TempDir(), "remote.yaml")
	writeFile(t, remote, fmt.Sprintf("kafka: {brokers: [%q]}\napp: {url: http://127.0.0.1:8080/kafka}\nmetrics: {listen: \"\"}\ntopics: [{name: orders}]\n", addr))

	embeddedHint := []string{addr, "embedded.listen", "kafka.brokers is [embedded]", "`kretry run`", "`kretry broker`", "start one of them"}
	remoteHint := []string{addr, "(kafka.brokers)", "KRETRY_KAFKA__BROKERS", "check that the brokers are up"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"lag", "-c", embedded}, embeddedHint},
		{[]string{"lag", "-c", remote}, remoteHint},
		{[]string{"parking", "release", "-c", embedded, "--topic", "orders", "--key", "k"}, embeddedHint},
		{[]string{"parking", "release", "-c", remote, "--topic", "orders", "--key", "k"}, remoteHint},
		{[]string{"run", "-c", remote}, remoteHint},
	} {
		name := strings.Join(tc.args[:2], " ")
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		if code != exitFail {
			t.Errorf("%s: exit %d, want %d", name, code, exitFail)
		}
		for _, w := range tc.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("%s: stderr lacks %q:\n%s", name, w, errb.String())
			}
		}
		if name != "run -c" {
			if n := strings.Count(out.String()+errb.String(), "connection refused"); n != 1 {
				t.Errorf("%s: the dial error is printed %d times, want once:\nstdout:\n%s\nstderr:\n%s", name, n, out.String(), errb.String())
			}
		}
	}
}
