package config

// The checks of topics[]: names (Kafka's rule, and each topic name used
// once), groups, ordering, retry tiers and classification; the overload
// keys are checked in overload.go.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// topics checks every topic of ts; at least one is required.
func (v *validator) topics(ts []Topic) {
	if len(ts) == 0 {
		v.add("topics", "at least one topic is required")
		return
	}
	names := map[string]string{}  // Kafka topic name → first key path using it
	groups := map[string]string{} // consumer group → first key path using it
	// use registers a topic name, reporting whether it was fine.
	use := func(path, name string) bool {
		if !v.topicName(path, name) {
			return false
		}
		if first, ok := names[name]; ok {
			v.add(path, "%q is already used by %s", name, first)
			return false
		}
		names[name] = path
		return true
	}
	for i := range ts {
		v.topic(fmt.Sprintf("topics[%d]", i), &ts[i], use, groups)
	}
}

// topic checks topic t (p is its key path); use registers a topic name
// (see topics), groups the consumer groups seen so far.
func (v *validator) topic(p string, t *Topic, use func(path, name string) bool, groups map[string]string) {
	// A name derived from a bad or duplicate source name repeats its
	// problem; only the source name is reported then.
	nameOK := use(p+".name", t.Name)
	derived := func(path, name, def string) {
		if nameOK || name != def {
			use(path, name)
		}
	}

	v.group(p, t, nameOK, groups)

	v.oneOf(p+".ordering", string(t.Ordering), flowNames(flow.Orderings)...)
	v.oneOf(p+".on_dead_letter", string(t.OnDeadLetter), flowNames(flow.OnDeadLetters)...)
	if t.Parking.MaxRecords < 1 {
		v.add(p+".parking.max_records", "%q must be at least 1", fmtInt(t.Parking.MaxRecords))
	}

	v.retry(p, &t.Retry)
	for k, name := range t.Retry.Topics {
		def := ""
		if k < len(t.Retry.Tiers) {
			def = retrytopics.TierTopic(t.Name, t.Retry.Tiers[k])
		}
		derived(fmt.Sprintf("%s.retry.topics[%d]", p, k), name, def)
	}
	derived(p+".dlq.topic", t.DLQ.Topic, retrytopics.DLQTopic(t.Name))
	if r := t.DLQ.Retention; r != 0 && r%time.Millisecond != 0 {
		// retention.ms is whole milliseconds: 500us would create a
		// DLQ that keeps nothing, -1ns one that is not kept forever.
		v.add(p+".dlq.retention", "%q must be a whole number of milliseconds (retention.ms): 0 derives it from the source, a negative one such as -1ms keeps records forever", fmtDuration(r))
	}
	if t.Ordering.Parks() {
		derived(p+".parking.topic", t.Parking.Topic, retrytopics.ParkingTopic(t.Name))
	}

	v.statuses(p, &t.Classify)
	v.overload(p, t)
}

// group checks topic t's consumer group (p is its key path): required,
// and one per topic; groups maps each group to the first key path using
// it. A group derived from a bad name (nameOK false) is not reported again.
func (v *validator) group(p string, t *Topic, nameOK bool, groups map[string]string) {
	switch first, dup := groups[t.Group]; {
	case t.Group == "":
		v.add(p+".group", "required")
	case !nameOK && t.Group == t.Name+DefaultGroupSuffix:
		// derived from a bad name: already reported
	case dup:
		v.add(p+".group", "%q is already used by %s", t.Group, first)
	default:
		groups[t.Group] = p + ".group"
	}
}

// retry checks the retry tiers of the topic at key path p: each at least
// MinTier, in whole milliseconds and longer than the one before; the
// jitter in [0, 1]; one topic name per tier.
func (v *validator) retry(p string, r *Retry) {
	for k, d := range r.Tiers {
		tp := fmt.Sprintf("%s.retry.tiers[%d]", p, k)
		switch {
		case d < MinTier:
			v.add(tp, "%q must be at least %s", fmtDuration(d), fmtDuration(MinTier))
		case d%time.Millisecond != 0:
			v.add(tp, "%q must be a whole number of milliseconds", fmtDuration(d))
		}
		if k > 0 && d <= r.Tiers[k-1] {
			v.add(tp, "%q must be greater than %q", fmtDuration(d), fmtDuration(r.Tiers[k-1]))
		}
	}
	if j := r.Jitter; j != nil && !(*j >= 0 && *j <= 1) {
		v.add(p+".retry.jitter", "%q must be between 0 and 1", strconv.FormatFloat(*j, 'g', -1, 64))
	}
	if len(r.Topics) != len(r.Tiers) {
		v.add(p+".retry.topics", "has %d names for %d tiers; give one per tier", len(r.Topics), len(r.Tiers))
	}
}

// topicName reports whether name is a legal Kafka topic name, adding an
// error if not. The rule is Kafka's (org.apache.kafka.common.internals.Topic).
func (v *validator) topicName(path, name string) bool {
	if name == "" {
		v.add(path, "required")
		return false
	}
	ok := len(name) <= MaxTopicNameLen && name != "." && name != ".."
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		v.add(path, `%q is not a legal Kafka topic name (1-%d characters of a-z A-Z 0-9 . _ -, not "." or "..")`, name, MaxTopicNameLen)
	}
	return ok
}

func (v *validator) statuses(p string, c *Classify) {
	check := func(list string, codes []int) {
		for k, s := range codes {
			path := fmt.Sprintf("%s.classify.%s[%d]", p, list, k)
			switch {
			case s < 100 || s > 599:
				v.add(path, "%q is not an HTTP status (100-599)", fmtInt(s))
			case s >= 200 && s <= 299:
				v.add(path, "%q is a 2xx status, which always means done", fmtInt(s))
			}
		}
	}
	check("permanent", c.Permanent)
	check("transient", c.Transient)
	for k, s := range c.Transient {
		if slices.Contains(c.Permanent, s) {
			v.add(fmt.Sprintf("%s.classify.transient[%d]", p, k), "%q is also in %s.classify.permanent%s", fmtInt(s), p, defaultListHint(p, c, s))
		}
	}
}

// defaultListHint says which of c's lists is the default one, when one is:
// a status in both was most likely added to one list while the other was
// left to its default, which the user never wrote.
func defaultListHint(p string, c *Classify, status int) string {
	for _, l := range []struct {
		name  string
		codes []int
		def   []int
	}{{"transient", c.Transient, DefaultTransient()}, {"permanent", c.Permanent, DefaultPermanent()}} {
		if slices.Equal(l.codes, l.def) {
			return fmt.Sprintf("; %s.classify.%s is its default (%s): set it without %d", p, l.name, joinInts(l.def), status)
		}
	}
	return ""
}

// joinInts writes codes as "408, 425, 429".
func joinInts(codes []int) string {
	s := make([]string, len(codes))
	for i, c := range codes {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ", ")
}
