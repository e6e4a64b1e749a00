package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/config"
)

func TestEnvOverrides(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin",
		"KRETRY_CONFIG=/etc/kretry/config.yaml", // reserved, not a key
		"KRETRY_APP__MAX_IN_FLIGHT=8",
		"KRETRY_APP__TIMEOUT=30s",
		"KRETRY_KAFKA__BROKERS=kafka-0:9092, kafka-1:9092",
		"KRETRY_KAFKA__TLS__ENABLED=true",
		"KRETRY_METRICS__LISTEN=",
		"KRETRY_TOPICS__0__RETRY__TIERS=1s,1m",
		"KRETRY_TOPICS__0__RETRY__JITTER=0.5",
		"KRETRY_TOPICS__0__CLASSIFY__TRANSIENT=503",
		"KRETRY_TOPICS__1__NAME=payments", // appends a topic
	}
	c, err := config.Parse([]byte(minimal), environ)
	if err != nil {
		t.Fatal(err)
	}
	if c.App.MaxInFlight != 8 || c.App.Timeout != 30*time.Second {
		t.Errorf("app = %+v", c.App)
	}
	if !reflect.DeepEqual(c.Kafka.Brokers, []string{"kafka-0:9092", "kafka-1:9092"}) {
		t.Errorf("brokers = %q", c.Kafka.Brokers)
	}
	if !c.Kafka.TLS.Enabled {
		t.Errorf("tls not enabled")
	}
	if c.Metrics.Listen != "" {
		t.Errorf("metrics.listen = %q, want disabled", c.Metrics.Listen)
	}
	o := c.Topics[0]
	if !reflect.DeepEqual(o.Retry.Tiers, []time.Duration{time.Second, time.Minute}) ||
		!reflect.DeepEqual(o.Retry.Topics, []string{"orders.retry.1s", "orders.retry.1m"}) ||
		*o.Retry.Jitter != 0.5 || !reflect.DeepEqual(o.Classify.Transient, []int{503}) {
		t.Errorf("orders = %+v", o)
	}
	if o.Name != "orders" || o.Group != "orders-kretry" {
		t.Errorf("orders lost its file values: %+v", o)
	}
	if len(c.Topics) != 2 || c.Topics[1].Name != "payments" || c.Topics[1].DLQ.Topic != "payments.dlq" {
		t.Errorf("topics = %+v", c.Topics)
	}
}

// TestEnvListIndex: a number after a list key overrides one element, also
// when the file does not have the section at all.
func TestEnvListIndex(t *testing.T) {
	for _, tc := range []struct {
		yaml, env string
		want      []string
	}{
		{minimal, "KRETRY_KAFKA__BROKERS__0=kafka-0:9092", []string{"kafka-0:9092"}},
		{minimal + "kafka: {brokers: [a:9092, b:9092]}\n", "KRETRY_KAFKA__BROKERS__1=c:9092", []string{"a:9092", "c:9092"}},
		{minimal + "kafka: {brokers: [a:9092]}\n", "KRETRY_KAFKA__BROKERS__1=b:9092", []string{"a:9092", "b:9092"}},
	} {
		c, err := config.Parse([]byte(tc.yaml), []string{tc.env})
		if err != nil {
			t.Errorf("%s: %v", tc.env, err)
			continue
		}
		if !reflect.DeepEqual(c.Kafka.Brokers, tc.want) {
			t.Errorf("%s: brokers = %q, want %q", tc.env, c.Kafka.Brokers, tc.want)
		}
	}
}

// TestEnvWithoutFile: a config can be given entirely by environment.
func TestEnvWithoutFile(t *testing.T) {
	c, err := config.Parse(nil, []string{
		"KRETRY_APP__URL=http://127.0.0.1:8080/kafka",
		"KRETRY_TOPICS__0__NAME=orders",
	})
	if err != nil {
		t.Fatal(err)
	}
	wantDefaults(t, c)
}

// TestEnvVarIsReadBack: EnvVar names the variable that Parse reads for a
// config key, nested and in a list.
func TestEnvVarIsReadBack(t *testing.T) {
	if got := config.EnvVar("metrics.listen"); got != "KRETRY_METRICS__LISTEN" {
		t.Errorf("EnvVar(metrics.listen) = %q", got)
	}
	c, err := config.Parse([]byte(minimal), []string{
		config.EnvVar("metrics.listen") + "=127.0.0.1:9474",
		config.EnvVar("topics.0.group") + "=orders-b",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Metrics.Listen != "127.0.0.1:9474" || c.Topics[0].Group != "orders-b" {
		t.Errorf("metrics.listen %q, topics[0].group %q; want the variables' values", c.Metrics.Listen, c.Topics[0].Group)
	}
}
