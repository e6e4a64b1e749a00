package lag_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/pkg/config"
)

func TestFromConfig(t *testing.T) {
	c, err := config.Parse([]byte(`
app: {url: http://127.0.0.1:8080/kafka}
metrics: {per_partition: false}
lag: {interval: 5s, window: 3, dlq_group: replay, groups: [{name: billing, read_committed: true}]}
topics:
  - name: orders
    ordering: key
    retry: {tiers: [1m, 10m], jitter: 0.5}
  - name: audit
    ordering: none
    retry: {tiers: []}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := lag.FromConfig(c)
	want := lag.Config{
		Groups: []lag.Group{
			{Name: "orders-kretry", ReadCommitted: true, Topics: []lag.Topic{
				{Name: "orders", Source: "orders", Stage: "source"},
				{Name: "orders.retry.1m", Source: "orders", Stage: "tier-1", Wait: 90 * time.Second},
				{Name: "orders.retry.10m", Source: "orders", Stage: "tier-2", Wait: 15 * time.Minute},
				{Name: "orders.parking", Source: "orders", Stage: "parking", Wait: 16*time.Minute + 30*time.Second},
			}},
			{Name: "audit-kretry", ReadCommitted: true, Topics: []lag.Topic{{Name: "audit", Source: "audit", Stage: "source"}}},
			{Name: "billing", ReadCommitted: true},
		},
		DLQs:     []lag.DLQ{{Topic: "orders.dlq", Source: "orders"}, {Topic: "audit.dlq", Source: "audit"}},
		DLQGroup: "replay",
		Interval: 5 * time.Second,
		Timeout:  10 * time.Second,
		Window:   3,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("FromConfig:\ngot  %+v\nwant %+v", got, want)
	}
}
