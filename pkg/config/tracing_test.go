package config_test

import (
	"testing"

	"github.com/kretry/kretry/pkg/config"
)

// TestTracing: the tracing section is off by default, takes its values
// from the file, and every key has a KRETRY_TRACING__ override.
func TestTracing(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		environ []string
		want    config.Tracing
	}{
		{"default", minimal, nil, config.Tracing{ServiceName: "kretry", SampleRatio: 1}},
		{"file", minimal + `
tracing:
  enabled: true
  otlp_endpoint: http://otel-collector:4318
  service_name: orders-sidecar
  sample_ratio: 0.25
`, nil, config.Tracing{Enabled: true, OTLPEndpoint: "http://otel-collector:4318", ServiceName: "orders-sidecar", SampleRatio: 0.25}},
		{"endpoint without enabled", minimal + "tracing: {otlp_endpoint: \"https://otel.example.com/v1/traces\"}\n", nil,
			config.Tracing{OTLPEndpoint: "https://otel.example.com/v1/traces", ServiceName: "kretry", SampleRatio: 1}},
		{"sample ratio 0", minimal + "tracing: {sample_ratio: 0}\n", nil, config.Tracing{ServiceName: "kretry", SampleRatio: 0}},
		{"env", minimal, []string{
			"KRETRY_TRACING__ENABLED=true",
			"KRETRY_TRACING__OTLP_ENDPOINT=http://127.0.0.1:4318",
			"KRETRY_TRACING__SERVICE_NAME=billing",
			"KRETRY_TRACING__SAMPLE_RATIO=0.5",
		}, config.Tracing{Enabled: true, OTLPEndpoint: "http://127.0.0.1:4318", ServiceName: "billing", SampleRatio: 0.5}},
		{"env over file", minimal + "tracing: {enabled: true, otlp_endpoint: \"http://a:4318\"}\n",
			[]string{"KRETRY_TRACING__ENABLED=false"},
			config.Tracing{OTLPEndpoint: "http://a:4318", ServiceName: "kretry", SampleRatio: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := config.Parse([]byte(tt.yaml), tt.environ)
			if err != nil {
				t.Fatal(err)
			}
			if c.Tracing != tt.want {
				t.Errorf("tracing %+v, want %+v", c.Tracing, tt.want)
			}
		})
	}
}
