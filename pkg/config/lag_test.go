package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/config"
)

func TestLagValues(t *testing.T) {
	c, err := config.Parse([]byte(minimal+`
metrics: {per_partition: false}
lag:
  interval: 5s
  timeout: 2s
  window: 4
  dlq_group: dlq-replay
  groups:
    - name: billing
    - name: audit
      read_committed: true
`), []string{"KRETRY_LAG__GROUPS__2__NAME=shipping", "KRETRY_LAG__INTERVAL=0s"})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Lag{
		Interval: 0,
		Timeout:  2 * time.Second,
		Window:   4,
		DLQGroup: "dlq-replay",
		Groups:   []config.LagGroup{{Name: "billing"}, {Name: "audit", ReadCommitted: true}, {Name: "shipping"}},
	}
	if !reflect.DeepEqual(c.Lag, want) {
		t.Errorf("lag = %+v, want %+v", c.Lag, want)
	}
	if c.Metrics.PerPartition {
		t.Error("metrics.per_partition: false was not applied")
	}
}
