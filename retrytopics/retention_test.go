package retrytopics_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kretry/kretry/retrytopics"
)

const day = 24 * time.Hour

// TestDLQRetention: a DLQ that Ensure creates keeps records longer than
// its source (twice, at least 14 days) or as configured; an existing one
// that keeps them for less time than the source is a warning.
func TestDLQRetention(t *testing.T) {
	for _, tc := range []struct {
		name       string
		source     string // retention.ms of the source; "" for the default (7 days)
		configured time.Duration
		want       string
	}{
		{"default source", "", 0, strconv.FormatInt((14 * day).Milliseconds(), 10)},
		{"long source", strconv.FormatInt((10 * day).Milliseconds(), 10), 0, strconv.FormatInt((20 * day).Milliseconds(), 10)},
		{"source forever", "-1", 0, "-1"},
		{"configured", "", 30 * day, strconv.FormatInt((30 * day).Milliseconds(), 10)},
		{"configured forever", "", -time.Millisecond, "-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, adm, _ := newAdmin(t)
			var cfg map[string]*string
			if tc.source != "" {
				cfg = map[string]*string{"retention.ms": kadm.StringPtr(tc.source)}
			}
			if _, err := adm.CreateTopic(ctx, 1, -1, cfg, "orders"); err != nil {
				t.Fatal(err)
			}
			p := &retrytopics.Plan{Source: "orders", DLQ: "orders.dlq", DLQRetention: tc.configured}
			got, err := retrytopics.Ensure(ctx, adm, p, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Warnings) != 0 {
				t.Errorf("warnings %v for a DLQ kretry created", got.Warnings)
			}
			if r := topicConfig(t, adm, "orders.dlq", "retention.ms"); r != tc.want {
				t.Fatalf("orders.dlq retention.ms = %q, want %q", r, tc.want)
			}
		})
	}
	t.Run("existing shorter DLQ", func(t *testing.T) {
		ctx, adm, _ := newAdmin(t)
		if _, err := adm.CreateTopic(ctx, 1, -1, nil, "orders"); err != nil {
			t.Fatal(err)
		}
		if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": kadm.StringPtr(strconv.FormatInt(day.Milliseconds(), 10))}, "orders.dlq"); err != nil {
			t.Fatal(err)
		}
		got, err := retrytopics.Ensure(ctx, adm, &retrytopics.Plan{Source: "orders", DLQ: "orders.dlq"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], `DLQ "orders.dlq" keeps records for 24h0m0s`) || !strings.Contains(got.Warnings[0], "retention.ms") {
			t.Fatalf("warnings %q, want one naming the DLQ, its retention and what to raise", got.Warnings)
		}
	})
}

func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) string {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == key && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}
