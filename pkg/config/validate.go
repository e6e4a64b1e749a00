package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// Limits applied by Validate.
const (
	// MaxTopicNameLen is Kafka's limit on topic names (Topic.MAX_NAME_LENGTH
	// in org.apache.kafka.common.internals.Topic).
	MaxTopicNameLen = 249
	// MinTier is the shortest retry delay: due times are written in ms.
	MinTier = time.Millisecond
	// MinFetchMaxWait is franz-go's lower bound on kgo.FetchMaxWait.
	MinFetchMaxWait = 10 * time.Millisecond
	// MinLagInterval is the shortest time between two lag scans.
	MinLagInterval = 100 * time.Millisecond
	// MinLagWindow and MaxLagWindow bound lag.window (scans): the status
	// compares at least two scans, and the history kept per partition is
	// one sample per scan in the window.
	MinLagWindow = 2
	MaxLagWindow = 1000
)

// Validate checks a Config after SetDefaults and returns every problem it
// finds as an errors.Join of *FieldError, in the order of the sections
// below, each naming the key path and quoting the bad value:
//
//	topics[0].retry.tiers[2]: "10m" must be greater than "1h"
//
// The rules:
//
//   - kafka.brokers: not empty; either exactly [embedded] or host:port
//     addresses with a non-empty host and a numeric port in 1..65535
//     ("embedded" cannot be mixed with addresses).
//   - kafka.transactional_id: not empty (every move is transactional).
//   - kafka.instance_id: empty (the host name) or letters, digits, '.',
//     '_' and '-', at most 200 characters.
//   - kafka.fetch_max_wait: at least 10ms (franz-go's minimum).
//   - kafka.session_timeout: at least 1s.
//   - kafka.sasl.mechanism: "", "plain", "scram-sha-256" or
//     "scram-sha-512" (lower case); when set, kafka.sasl.password is
//     required too, and kafka.sasl.username is
//     required.
//   - kafka.tls.ca_file, cert_file, key_file: when set, the file exists
//     (relative paths are relative to the working directory) and is not a
//     directory; cert_file and key_file come together; setting any of them
//     requires kafka.tls.enabled: true.
//   - embedded.listen: host:port (host may be empty, port 0..65535).
//   - embedded.partitions: at least 1.
//   - app.url: an absolute http:// or https:// URL with a host.
//   - app.timeout: greater than 0.
//   - app.max_in_flight: at least 1, or auto; app.max_rate: at least 0.
//   - app.ce_type: not empty (CloudEvents requires type).
//   - metrics.listen: "" (disabled) or host:port as for embedded.listen.
//   - log.level: debug, info, warn or error; log.format: text or json.
//   - topics: at least one.
//   - lag.interval: 0 (monitor off) or at least 100ms.
//   - lag.timeout: greater than 0.
//   - lag.window: 2..1000 scans.
//   - lag.groups[i].name: required, listed once, and not one of kretry's
//     own groups (topics[].group), which are monitored anyway.
//   - lag.dlq_group: "" or a group that is not one of kretry's own.
//   - tracing.otlp_endpoint: required when tracing.enabled; when set, an
//     absolute http:// or https:// URL with a host.
//   - tracing.service_name: not empty.
//   - tracing.sample_ratio: in [0, 1].
//
// Per topic (topics[i]):
//
//   - name: a legal Kafka topic name: 1..249 characters from
//     [a-zA-Z0-9._-], not "." or "..". The same holds for each of
//     retry.topics and dlq.topic.
//   - group: not empty, and not shared with another topic (the
//     transactional ID is derived from it, so two topics would fence each
//     other).
//   - ordering: key, partition or none.
//   - on_dead_letter: release, dead_letter or hold.
//   - parking.max_records: at least 1 (0 is taken as absent: the default,
//     set by SetDefaults; there is no unbounded parking).
//   - retry.tiers: each at least 1ms and a whole number of ms (the topic
//     name and the due-time header carry ms), strictly increasing.
//   - retry.jitter: in [0, 1].
//   - retry.topics: one name per tier.
//   - source, tier, DLQ and (unless ordering is none) parking topic names:
//     all distinct, within a topic and across topics.
//   - classify.permanent, classify.transient: statuses in 100..599, no
//     2xx (2xx is always done), no status in both lists.
//   - max_age, on_expired, breaker, guard, retry.budget: see overload.go.
//
// A group, tier topic or DLQ topic that still has the name derived from a
// bad or duplicate source name is not reported again. Validate reads the
// file system only to check the TLS files.
func (c *Config) Validate() error {
	v := &validator{}
	v.kafka(&c.Kafka)
	v.hostPort("embedded.listen", c.Embedded.Listen, false)
	if c.Embedded.Partitions < 1 {
		v.add("embedded.partitions", "%q must be at least 1", fmtInt(int(c.Embedded.Partitions)))
	}
	v.app(&c.App)
	if c.Metrics.Listen != "" {
		v.hostPort("metrics.listen", c.Metrics.Listen, false)
	}
	v.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	v.oneOf("log.format", c.Log.Format, "text", "json")
	v.topics(c.Topics)
	v.lag(&c.Lag, c.Topics)
	v.tracing(&c.Tracing)
	v.admin(&c.Admin)
	v.listens(c)
	return errors.Join(v.errs...)
}

func (v *validator) tracing(t *Tracing) {
	switch {
	case t.OTLPEndpoint == "" && t.Enabled:
		v.add("tracing.otlp_endpoint", "required when tracing.enabled is true: the OTLP/HTTP collector, such as \"http://127.0.0.1:4318\"")
	case t.OTLPEndpoint != "":
		if u, err := url.Parse(t.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.add("tracing.otlp_endpoint", "%q must be an absolute http:// or https:// URL with a host (OTLP over HTTP, port 4318 by convention)", t.OTLPEndpoint)
		}
	}
	if t.ServiceName == "" {
		v.add("tracing.service_name", "required: the service.name of the spans")
	}
	if !(t.SampleRatio >= 0 && t.SampleRatio <= 1) {
		v.add("tracing.sample_ratio", "%q must be between 0 and 1", strconv.FormatFloat(t.SampleRatio, 'g', -1, 64))
	}
}

func (v *validator) lag(l *Lag, topics []Topic) {
	if l.Interval != 0 && l.Interval < MinLagInterval {
		v.add("lag.interval", "%q must be 0 (off) or at least %s", fmtDuration(l.Interval), fmtDuration(MinLagInterval))
	}
	if l.Timeout <= 0 {
		v.add("lag.timeout", "%q must be greater than 0", fmtDuration(l.Timeout))
	}
	if l.Window < MinLagWindow || l.Window > MaxLagWindow {
		v.add("lag.window", "%q must be between %d and %d scans", fmtInt(l.Window), MinLagWindow, MaxLagWindow)
	}
	own := map[string]string{} // kretry group → its key path
	for i, t := range topics {
		if _, dup := own[t.Group]; !dup && t.Group != "" {
			own[t.Group] = fmt.Sprintf("topics[%d].group", i)
		}
	}
	seen := map[string]string{}
	for i, g := range l.Groups {
		path := fmt.Sprintf("lag.groups[%d].name", i)
		switch first, dup := seen[g.Name]; {
		case g.Name == "":
			v.add(path, "required")
		case own[g.Name] != "":
			v.add(path, "%q is kretry's own group (%s), which is monitored anyway", g.Name, own[g.Name])
		case dup:
			v.add(path, "%q is already listed as %s", g.Name, first)
		default:
			seen[g.Name] = path
		}
	}
	if p := own[l.DLQGroup]; l.DLQGroup != "" && p != "" {
		v.add("lag.dlq_group", "%q is kretry's own group (%s); name the group that drains the DLQ", l.DLQGroup, p)
	}
}

type validator struct {
	errs []error
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// flowNames returns the typed names of flow as strings, for oneOf.
func flowNames[S ~string](ns []S) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = string(n)
	}
	return out
}

func (v *validator) oneOf(path, val string, allowed ...string) {
	if slices.Contains(allowed, val) {
		return
	}
	v.add(path, "%q must be one of %s", val, strings.Join(allowed, ", "))
}

func (v *validator) kafka(k *Kafka) {
	v.brokers(k.Brokers)
	if k.TransactionalID == "" {
		v.add("kafka.transactional_id", "required: every move is a Kafka transaction")
	}
	if id := k.InstanceID; id != "" {
		v.instanceID(id)
	}
	if k.SessionTimeout < time.Second {
		v.add("kafka.session_timeout", "%q must be at least 1s", fmtDuration(k.SessionTimeout))
	}
	if k.FetchMaxWait < MinFetchMaxWait {
		v.add("kafka.fetch_max_wait", "%q must be at least %s", fmtDuration(k.FetchMaxWait), fmtDuration(MinFetchMaxWait))
	}
	v.sasl(&k.SASL)
	v.tls(&k.TLS)
}

// brokers checks kafka.brokers: at least one, each a host:port, or
// [embedded] alone.
func (v *validator) brokers(brokers []string) {
	switch {
	case len(brokers) == 0:
		v.add("kafka.brokers", "at least one broker address (or %q) is required", Embedded)
	case len(brokers) > 1 && slices.Contains(brokers, Embedded):
		var addrs []string
		for _, b := range brokers {
			if b != Embedded {
				addrs = append(addrs, strconv.Quote(b))
			}
		}
		v.add("kafka.brokers", "%q cannot be mixed with broker addresses (%s)", Embedded, strings.Join(addrs, ", "))
	}
	for i, b := range brokers {
		if b != Embedded {
			v.hostPort(fmt.Sprintf("kafka.brokers[%d]", i), b, true)
		}
	}
}

// instanceID checks a set kafka.instance_id against Kafka's rule for
// group.instance.id: its characters and its length.
func (v *validator) instanceID(id string) {
	if err := flow.CheckInstanceID(id); err != nil {
		v.add("kafka.instance_id", "%v", err)
	}
}

// sasl checks kafka.sasl: a known mechanism, with its username and
// password.
func (v *validator) sasl(s *SASL) {
	switch s.Mechanism {
	case "":
	case "plain", "scram-sha-256", "scram-sha-512":
		if s.Username == "" {
			v.add("kafka.sasl.username", "required when kafka.sasl.mechanism is %q", s.Mechanism)
		}
		if s.Password == "" {
			v.add("kafka.sasl.password", "required when kafka.sasl.mechanism is %q (set it with KRETRY_KAFKA__SASL__PASSWORD rather than in the file)", s.Mechanism)
		}
	default:
		v.add("kafka.sasl.mechanism", `%q must be one of "" (none), plain, scram-sha-256, scram-sha-512`, s.Mechanism)
	}
}

// tls checks kafka.tls: each file set exists, is not a directory and goes
// with kafka.tls.enabled, and a certificate comes with its key.
func (v *validator) tls(t *TLS) {
	files := []struct{ key, path string }{
		{"ca_file", t.CAFile}, {"cert_file", t.CertFile}, {"key_file", t.KeyFile},
	}
	for _, f := range files {
		if f.path == "" {
			continue
		}
		path := "kafka.tls." + f.key
		if !t.Enabled {
			v.add(path, "%q is set but kafka.tls.enabled is false", f.path)
		}
		switch st, err := os.Stat(f.path); {
		case errors.Is(err, os.ErrNotExist):
			v.add(path, "%q does not exist", f.path)
		case err != nil:
			v.add(path, "%q: %v", f.path, err)
		case st.IsDir():
			v.add(path, "%q is a directory", f.path)
		}
	}
	if t.CertFile != "" && t.KeyFile == "" {
		v.add("kafka.tls.key_file", "required when kafka.tls.cert_file is set")
	}
	if t.KeyFile != "" && t.CertFile == "" {
		v.add("kafka.tls.cert_file", "required when kafka.tls.key_file is set")
	}
}

// hostPort checks a host:port address. Broker addresses need a host and a
// port in 1..65535; listen addresses may leave the host empty (all
// interfaces) and use port 0 (any free port).
func (v *validator) hostPort(path, addr string, broker bool) {
	host, port, err := net.SplitHostPort(addr)
	n, perr := strconv.Atoi(port)
	minPort := 0
	if broker {
		minPort = 1
	}
	if err != nil || perr != nil || n < minPort || n > 65535 || (broker && host == "") {
		v.add(path, "%q must be host:port with a numeric port", addr)
	}
}

func (v *validator) app(a *App) {
	if a.URL == "" {
		v.add("app.url", "required: the URL that receives each record")
	} else if u, err := url.Parse(a.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add("app.url", "%q must be an absolute http:// or https:// URL with a host", a.URL)
	}
	if a.Timeout <= 0 {
		v.add("app.timeout", "%q must be greater than 0", fmtDuration(a.Timeout))
	}
	v.appOverload(a)
	if a.CEType == "" {
		v.add("app.ce_type", "required: CloudEvents needs a type")
	}
}

func fmtInt(n int) string { return strconv.Itoa(n) }

// fmtDuration writes whole-ms durations as they are written in YAML and
// topic names ("10m", "1h30m", "250ms"), anything else as
// time.Duration.String.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + fmtDuration(-d)
	case d > 0 && d%time.Millisecond == 0:
		return retrytopics.FormatTier(d)
	}
	return d.String()
}
