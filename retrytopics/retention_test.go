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

// TestStageRetention: the tiers and the parking topic that Ensure creates
// keep records long enough for what they hold (a tier: its source's
// retention, 14 days for a source kept forever, at least twice its
// longest wait; the parking topic: as the DLQ); existing ones that keep
// them for less are a warning each.
func TestStageRetention(t *testing.T) {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	plan := func() *retrytopics.Plan {
		return &retrytopics.Plan{Source: "orders", DLQ: "orders.dlq", Jitter: 0.5, Tiers: []retrytopics.Tier{
			{Topic: "orders.retry.1h", Delay: time.Hour}, {Topic: "orders.retry.5d", Delay: 5 * day},
		}}
	}
	for _, tc := range []struct {
		name                 string
		source               string // retention.ms of the source; "" for the default (7 days)
		tier1h, tier5d, park string
	}{
		{"default source", "", ms(7 * day), ms(15 * day), ms(14 * day)},
		{"short source", ms(time.Hour), ms(3 * time.Hour), ms(15 * day), ms(14 * day)},
		{"source forever", "-1", ms(14 * day), ms(15 * day), "-1"},
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
			got, err := retrytopics.Ensure(ctx, adm, plan(), 0, "orders.parking")
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Warnings) != 0 {
				t.Errorf("warnings %v for topics kretry created", got.Warnings)
			}
			for topic, want := range map[string]string{"orders.retry.1h": tc.tier1h, "orders.retry.5d": tc.tier5d, "orders.parking": tc.park} {
				if r := topicConfig(t, adm, topic, "retention.ms"); r != want {
					t.Errorf("%s retention.ms = %q, want %q", topic, r, want)
				}
			}
		})
	}
	t.Run("existing short tier and parking topic", func(t *testing.T) {
		ctx, adm, _ := newAdmin(t)
		for topic, r := range map[string]string{"orders": "", "orders.retry.1h": ms(2 * time.Hour), "orders.retry.5d": ms(20 * day), "orders.parking": ms(day)} {
			var cfg map[string]*string
			if r != "" {
				cfg = map[string]*string{"retention.ms": kadm.StringPtr(r)}
			}
			if _, err := adm.CreateTopic(ctx, 1, -1, cfg, topic); err != nil {
				t.Fatal(err)
			}
		}
		got, err := retrytopics.Ensure(ctx, adm, plan(), 0, "orders.parking")
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(got.Warnings, "\n")
		if len(got.Warnings) != 2 ||
			!strings.Contains(all, `tier "orders.retry.1h" keeps records for 2h0m0s (retention.ms), less than twice its longest wait (1h30m0s)`) ||
			!strings.Contains(all, `parking topic "orders.parking" keeps records for 24h0m0s (retention.ms), less than its source "orders" (168h0m0s)`) {
			t.Fatalf("warnings:\n%s\nwant two: the 1h tier (2h kept, 1h30m wait) and the parking topic (1 day kept, source 7 days); the 5d tier keeps 20 days, enough", all)
		}
	})
}

// A retention.ms past time.Duration's range (292 years; 10^16 ms is 317)
// is forever, not an overflow (which read it as 59 years): the stages are
// created to keep records forever, with no warning.
func TestRetentionPastDurationRange(t *testing.T) {
	ctx, adm, _ := newAdmin(t)
	if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": kadm.StringPtr("10000000000000000")}, "orders"); err != nil {
		t.Fatal(err)
	}
	p := &retrytopics.Plan{Source: "orders", DLQ: "orders.dlq", Tiers: []retrytopics.Tier{{Topic: "orders.retry.1m", Delay: time.Minute}}}
	got, err := retrytopics.Ensure(ctx, adm, p, 0, "orders.parking")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Warnings) != 0 {
		t.Errorf("warnings %v", got.Warnings)
	}
	for topic, want := range map[string]string{"orders.dlq": "-1", "orders.parking": "-1", "orders.retry.1m": strconv.FormatInt((14 * day).Milliseconds(), 10)} {
		if r := topicConfig(t, adm, topic, "retention.ms"); r != want {
			t.Errorf("%s retention.ms = %q, want %q (forever as the source; a tier 14 days)", topic, r, want)
		}
	}
}

// Topics Ensure created are not warned about when it runs again: a tier
// whose longest wait is not a whole number of milliseconds (30m stretched
// by a jitter of 0.29: 38m41.999999999s) is created rounded up, not down
// (which warned "less than twice its longest wait" at every start), and a
// DLQ kept as topics[].dlq.retention asks, for less than the source, is
// not warned about either.
func TestEnsureAgainWarnsNothing(t *testing.T) {
	ctx, adm, _ := newAdmin(t)
	if _, err := adm.CreateTopic(ctx, 1, -1, map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, "orders"); err != nil {
		t.Fatal(err)
	}
	p := &retrytopics.Plan{Source: "orders", DLQ: "orders.dlq", Jitter: 0.29, DLQRetention: 30 * time.Minute,
		Tiers: []retrytopics.Tier{{Topic: "orders.retry.30m", Delay: 30 * time.Minute}}}
	for run := range 2 {
		got, err := retrytopics.Ensure(ctx, adm, p, 0, "orders.parking")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Warnings) != 0 {
			t.Errorf("run %d: warnings %q", run+1, got.Warnings)
		}
	}
	if r := topicConfig(t, adm, "orders.retry.30m", "retention.ms"); r != "4644000" {
		t.Errorf("orders.retry.30m retention.ms = %q, want 4644000 (2 × 38m41.999999999s, rounded up)", r)
	}
}
