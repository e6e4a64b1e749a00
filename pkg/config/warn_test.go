package config_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/kretry/kretry/pkg/config"
)

func TestWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, topics string
		want         []string
	}{
		{"defaults", "[{name: payments}]", nil},
		{"own names written out", "[{name: payments, group: payments-kretry, dlq: {topic: payments.dlq}, parking: {topic: payments.parking}, retry: {tiers: [1m], topics: [payments.retry.1m]}}]", nil},
		{"names of its own", "[{name: payments, group: billing, dlq: {topic: payments.dead}, retry: {tiers: [1m], topics: [pay-slow]}}]", nil},
		{
			"renamed from orders",
			"[{name: payments, group: orders-kretry, dlq: {topic: orders.dlq}, parking: {topic: orders.parking}, retry: {tiers: [1m, 10m], topics: [orders.retry.1m, payments.retry.10m]}}]",
			[]string{
				`topics[0].group: "orders-kretry" is topic "orders"'s default name, but this is topic "payments" (left over from a rename?); leave the key out for "payments-kretry"`,
				`topics[0].retry.topics[0]: "orders.retry.1m" is topic "orders"'s default name, but this is topic "payments" (left over from a rename?); leave the key out for "payments.retry.1m"`,
				`topics[0].dlq.topic: "orders.dlq" is topic "orders"'s default name, but this is topic "payments" (left over from a rename?); leave the key out for "payments.dlq"`,
				`topics[0].parking.topic: "orders.parking" is topic "orders"'s default name, but this is topic "payments" (left over from a rename?); leave the key out for "payments.parking"`,
			},
		},
		{"parking unused with ordering none", "[{name: payments, ordering: none, parking: {topic: orders.parking}}]", nil},
		{
			"second topic",
			"[{name: orders}, {name: payments, dlq: {topic: orders.dlq}}]",
			nil, // the DLQ is orders' own: Validate rejects the collision instead
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse([]byte("app: {url: http://127.0.0.1:8080/kafka}\ntopics: "+tc.topics+"\n"), nil)
			if tc.name == "second topic" {
				if err == nil {
					t.Fatal("Parse accepted two topics sharing a DLQ")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Warnings(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Warnings:\ngot  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestExampleConfigHasNoDerivedNames: config.yaml leaves the names derived
// from the topic name out, so that renaming the topic renames them.
func TestExampleConfigHasNoDerivedNames(t *testing.T) {
	ko, err := os.ReadFile("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(ko), "\n") {
		code, _, _ := strings.Cut(line, "#")
		if f := strings.Fields(code); len(f) > 0 && (f[0] == "group:" || f[0] == "topic:") {
			t.Errorf("config.yaml sets a derived name: %q", line)
		}
	}
}
