package config

import (
	"fmt"
	"strings"

	"github.com/kretry/kretry/retrytopics"
)

// Warnings returns what is valid but probably a mistake, one "path:
// message" line each, for `kretry validate` and `kretry run` to print. It
// expects a Config after SetDefaults.
//
// It flags a group, tier topic, DLQ or parking topic set to the default
// form of another source topic: <other>-kretry, <other>.retry.<tier>,
// <other>.dlq or <other>.parking. That is what renaming topics[].name
// leaves behind when the derived names were written out: the renamed
// topic keeps the old group and writes to the old topic's DLQ and parking
// topic beside its own new tiers.
func (c *Config) Warnings() []string {
	var w []string
	for i := range c.Topics {
		t := &c.Topics[i]
		p := fmt.Sprintf("topics[%d]", i)
		check := func(path, value, def, suffix string) {
			other, ok := strings.CutSuffix(value, suffix)
			if !ok || other == "" || value == def {
				return
			}
			w = append(w, fmt.Sprintf("%s: %q is topic %q's default name, but this is topic %q (left over from a rename?); leave the key out for %q",
				path, value, other, t.Name, def))
		}
		check(p+".group", t.Group, t.Name+DefaultGroupSuffix, DefaultGroupSuffix)
		for k, name := range t.Retry.Topics {
			if k >= len(t.Retry.Tiers) {
				break
			}
			def := retrytopics.TierTopic(t.Name, t.Retry.Tiers[k])
			if j := strings.LastIndex(name, ".retry."); j > 0 && !strings.HasPrefix(name, t.Name+".retry.") {
				check(fmt.Sprintf("%s.retry.topics[%d]", p, k), name, def, name[j:])
			}
		}
		check(p+".dlq.topic", t.DLQ.Topic, retrytopics.DLQTopic(t.Name), ".dlq")
		if t.Ordering.Parks() {
			check(p+".parking.topic", t.Parking.Topic, retrytopics.ParkingTopic(t.Name), ".parking")
		}
	}
	return w
}
