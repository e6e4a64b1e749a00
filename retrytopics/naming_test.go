package retrytopics_test

import (
	"testing"
	"time"

	"github.com/kretry/kretry/retrytopics"
)

func TestFormatTier(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{100 * time.Millisecond, "100ms"},
		{time.Millisecond, "1ms"},
		{time.Second, "1s"},
		{1500 * time.Millisecond, "1s500ms"},
		{1001 * time.Millisecond, "1s1ms"},
		{90 * time.Second, "1m30s"},
		{10 * time.Minute, "10m"},
		{time.Hour, "1h"},
		{time.Hour + time.Second, "1h1s"},
		{time.Hour + 30*time.Minute, "1h30m"},
		{24 * time.Hour, "24h"},
		{36 * time.Hour, "36h"},
		{36*time.Hour + 250*time.Millisecond, "36h250ms"},
		{0, "0s"},
		{-time.Minute, "0s"},
	} {
		if got := retrytopics.FormatTier(tc.d); got != tc.want {
			t.Errorf("FormatTier(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestTopicNames(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{retrytopics.TierTopic("orders", 100*time.Millisecond), "orders.retry.100ms"},
		{retrytopics.TierTopic("orders", time.Second), "orders.retry.1s"},
		{retrytopics.TierTopic("orders", 90*time.Second), "orders.retry.1m30s"},
		{retrytopics.TierTopic("orders", 10*time.Minute), "orders.retry.10m"},
		{retrytopics.TierTopic("orders", time.Hour), "orders.retry.1h"},
		{retrytopics.TierTopic("orders", 36*time.Hour), "orders.retry.36h"},
		{retrytopics.TierTopic("orders", time.Hour+time.Second), "orders.retry.1h1s"},
		{retrytopics.TierTopic("orders", 1500*time.Millisecond), "orders.retry.1s500ms"},
		{retrytopics.TierTopic("eu.orders-v2", time.Minute), "eu.orders-v2.retry.1m"},
		{retrytopics.DLQTopic("orders"), "orders.dlq"},
		{retrytopics.DLQTopic("eu.orders-v2"), "eu.orders-v2.dlq"},
		{retrytopics.ParkingTopic("orders"), "orders.parking"},
		{retrytopics.ParkingTopic("eu.orders-v2"), "eu.orders-v2.parking"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestTierTopicsDistinct checks that distinct whole-ms tiers (what config
// validation admits) never share a topic name, and that every name uses only
// the characters Kafka allows in a topic name ([a-zA-Z0-9._-]).
func TestTierTopicsDistinct(t *testing.T) {
	seen := map[string]time.Duration{}
	var tiers []time.Duration
	for ms := time.Duration(1); ms <= 5000; ms++ {
		tiers = append(tiers, ms*time.Millisecond)
	}
	for _, d := range []time.Duration{time.Minute, time.Minute + time.Millisecond, time.Hour, time.Hour + time.Millisecond,
		time.Hour + time.Second, time.Hour + time.Minute, 61 * time.Minute, 3601 * time.Second, 90 * time.Minute, 1000 * time.Hour} {
		tiers = append(tiers, d)
	}
	for _, d := range tiers {
		name := retrytopics.TierTopic("orders", d)
		if prev, ok := seen[name]; ok && prev != d {
			t.Fatalf("tiers %v and %v share the topic %q", prev, d, name)
		}
		seen[name] = d
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
				t.Fatalf("TierTopic(%v) = %q has %q, not legal in a Kafka topic name", d, name, c)
			}
		}
	}
}
