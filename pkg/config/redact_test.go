package config_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/kretry/kretry/pkg/config"
)

// TestPasswordRedacted: printing the config or its kafka section, in any
// fmt verb or through slog, never shows kafka.sasl.password.
func TestPasswordRedacted(t *testing.T) {
	const password = "pw-never-printed"
	cfg := config.Default()
	cfg.Kafka.SASL = config.SASL{Mechanism: "scram-sha-512", Username: "kretry", Password: password}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	log.Info("config", "sasl", cfg.Kafka.SASL, "kafka", cfg.Kafka)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "sasl", cfg.Kafka.SASL)
	for name, s := range map[string]string{
		"%v":    fmt.Sprintf("%v", cfg),
		"%+v":   fmt.Sprintf("%+v", cfg),
		"%#v":   fmt.Sprintf("%#v", cfg),
		"%s":    fmt.Sprintf("%s", cfg.Kafka.SASL),
		"kafka": fmt.Sprintf("%+v", cfg.Kafka),
		"slog":  logged.String(),
	} {
		if strings.Contains(s, password) {
			t.Errorf("%s shows the password: %s", name, s)
		}
		if !strings.Contains(s, "<redacted>") {
			t.Errorf("%s does not say the password is redacted: %s", name, s)
		}
	}
}
