package dlq

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kretry/kretry/pkg/config"
)

// TopicOf resolves name, a source topic (topics[].name) or its DLQ
// (topics[].dlq.topic), to the topics of that config entry. A tier, a
// parking topic or an unknown name is refused with ErrNotDLQ and what to
// pass instead.
func TopicOf(cfg *config.Config, name string) (Topic, error) {
	var known []string
	for i := range cfg.Topics {
		t := &cfg.Topics[i]
		if name == t.Name || name == t.DLQ.Topic {
			out := Topic{Source: t.Name, DLQ: t.DLQ.Topic}
			if len(t.Retry.Topics) > 0 {
				out.Tier = t.Retry.Topics[0]
			}
			return out, nil
		}
		if slices.Contains(t.Retry.Topics, name) {
			return Topic{}, fmt.Errorf("%w: %q is a retry tier of %q; its DLQ is %q (pass --topic %s)", ErrNotDLQ, name, t.Name, t.DLQ.Topic, t.Name)
		}
		if name == t.Parking.Topic {
			return Topic{}, fmt.Errorf("%w: %q is the parking topic of %q; its DLQ is %q (pass --topic %s; a parked key is released with kretry parking release)",
				ErrNotDLQ, name, t.Name, t.DLQ.Topic, t.Name)
		}
		known = append(known, t.Name+" → "+t.DLQ.Topic)
	}
	return Topic{}, fmt.Errorf("%w: %q is neither a topics[].name nor a topics[].dlq.topic of the config (known: %s)", ErrNotDLQ, name, strings.Join(known, ", "))
}
