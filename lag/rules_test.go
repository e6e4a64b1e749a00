package lag_test

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// rulesDir holds the shipped Prometheus rules and their unit tests.
var rulesDir = filepath.Join("..", "deploy", "prometheus")

// TestAlertRules runs `promtool check rules` on deploy/prometheus/
// kretry-rules.yaml and `promtool test rules` on its unit tests.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH (Debian package prometheus): the alert rules are not checked")
	}
	for _, args := range [][]string{
		{"check", "rules", "kretry-rules.yaml"},
		{"test", "rules", "kretry-rules.test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
