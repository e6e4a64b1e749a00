package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// instanceYAML is the head of a test instance's kretry.yaml, up to its
// topics section: the tests' fast fetch wait, a 6s session timeout (the
// embedded broker's minimum: a killed instance's partitions move after 6s
// instead of 45s), the app at appURL with the given keys under app: (such
// as "timeout: 2s"), /metrics on metricsAddr ("" for none), no lag monitor
// and info logs.
func instanceYAML(broker, appURL, metricsAddr string, app ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "kafka:\n  brokers: [%q]\n  fetch_max_wait: 50ms\n  session_timeout: 6s\n", broker)
	fmt.Fprintf(&b, "app:\n  url: %q\n", appURL)
	for _, kv := range app {
		fmt.Fprintf(&b, "  %s\n", kv)
	}
	fmt.Fprintf(&b, "metrics:\n  listen: %q\nlag:\n  interval: 0s\nlog:\n  level: info\n", metricsAddr)
	return b.String()
}

// writeYAML writes body as kretry.yaml in a directory of the test's and
// returns its path.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kretry.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
