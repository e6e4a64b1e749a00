// Package config defines kretry's configuration: its shape, its defaults and
// its validation. Load reads YAML through koanf/v2 with KRETRY_… environment
// overrides and rejects unknown keys, bad durations and impossible values with
// an error that names the key path and quotes the bad value, in the form
//
//	topics[0].retry.tiers[2]: "10m" must be greater than "1h"
//
// # Loading
//
// Load(path) reads a file and calls Parse(bytes, os.Environ()). Parse decodes
// the YAML over Default(), applies the environment overrides, fills the
// derived defaults (SetDefaults) and checks the result (Validate); it
// returns a Config only when all of that succeeds. Decoding is strict: a
// key that matches no field, compared case-sensitively, is an error
// ("app.urll: unknown key"); so is a value of the wrong type, a duration
// that time.ParseDuration rejects or a bare number where a duration is
// expected (`app.timeout: "10" is not a duration: it needs a unit…`), and
// a fraction where an integer is expected. An unknown key close to a valid
// one at its level (by edit distance) is answered with a guess:
// `app.max_inflight: unknown key, did you mean "max_in_flight"?`. The
// values that did decode are validated too, so that every problem is
// reported at once; what Validate would say about a key that failed to
// decode is left out. Every error is a *FieldError, and several are
// returned together with errors.Join, one per line; a file that is not
// YAML is a *SyntaxError naming the line at fault.
//
// # Defaults
//
// A key that is absent (or null) keeps its default; a key that is present
// replaces it, even with 0 or "" — so `metrics: {listen: ""}` disables the
// metrics endpoint and `retry: {tiers: []}` means no retry tiers, while
// `app: {timeout: 0}` is rejected by Validate rather than defaulted. The
// defaults are on the fields below, in Default and in SetDefaults.
//
// # Environment overrides
//
// Every variable named KRETRY_<PATH> overrides the key at <PATH>, where
// <PATH> is the key path upper-cased with a double underscore between
// levels and a list index as a number:
//
//	KRETRY_APP__MAX_IN_FLIGHT=8              app.max_in_flight: 8
//	KRETRY_APP__TIMEOUT=30s                  app.timeout: 30s
//	KRETRY_KAFKA__BROKERS=a:9092,b:9092      kafka.brokers: [a:9092, b:9092]
//	KRETRY_KAFKA__SASL__PASSWORD=secret      kafka.sasl.password: secret
//	KRETRY_TOPICS__0__RETRY__TIERS=1s,1m     topics[0].retry.tiers: [1s, 1m]
//	KRETRY_METRICS__LISTEN=                  metrics.listen: "" (disabled)
//
// The name after the prefix is lower-cased and "__" becomes a level. Values
// are strings, decoded as the field needs (numbers, booleans, durations).
// Where the field is a list, the value is split on commas and each element
// trimmed of spaces; an empty value is the empty list. (The same holds in
// YAML: a string where a list is expected is split on commas.) A number
// after a list key indexes that list: it overrides one element (or one key
// of a topic), or appends when it is the list's length; a larger index is
// an error. Overrides win over the file. Every KRETRY_ variable except
// KRETRY_CONFIG (reserved for the path of the config file) must name a
// known key; otherwise the error names the variable too:
//
//	app.urll: unknown key (from KRETRY_APP__URLL)
package config

import (
	"time"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// Embedded is the broker address list that starts the in-process
// Kafka-protocol broker (franz-go's kfake) instead of dialing real brokers.
const Embedded = "embedded"

// Config is the whole sidecar configuration (see config.yaml at the top of
// the repository for a commented example).
type Config struct {
	Kafka    Kafka   `koanf:"kafka"`
	Embedded Broker  `koanf:"embedded"`
	App      App     `koanf:"app"`
	Metrics  Metrics `koanf:"metrics"`
	Topics   []Topic `koanf:"topics"`
	Log      Log     `koanf:"log"`
	Lag      Lag     `koanf:"lag"`
	Tracing  Tracing `koanf:"tracing"`
	Admin    Admin   `koanf:"admin"` // admin.go
}

// Kafka is how kretry reaches the cluster.
type Kafka struct {
	// Brokers is a list of host:port seed brokers, or [embedded].
	Brokers []string `koanf:"brokers"`
	// ClientID is sent to the brokers with every request. Default "kretry".
	ClientID string `koanf:"client_id"`
	// TransactionalID prefixes the transactional IDs of kretry's producers;
	// each instance derives one per topic as <prefix>-<instance_id>-<group>.
	// Default "kretry".
	TransactionalID string `koanf:"transactional_id"`
	// InstanceID is the identity of one running instance: stable across
	// its restarts, unique among the live instances of a group. It names
	// the transactional ids (a restarted instance aborts what its
	// predecessor left open) and is the consumer's group.instance.id
	// (KIP-345 static membership: a restarted instance takes its partitions
	// back at once). Letters, digits, '.', '_' and '-', at most 200
	// characters. Default: the host name (see InstanceIDOrHost); set it
	// when two instances of one group share a host (hostNetwork pods, two
	// units on one VM). The Helm chart sets it to the pod name.
	InstanceID string `koanf:"instance_id"`
	// FetchMaxWait bounds how long a fetch waits for data (default 50ms). A
	// partition resumed after a pause (a tier record coming due, a source
	// partition after back-pressure) is fetched only once the fetch in
	// flight returns, so this bounds that delay; the cost is an idle fetch
	// per broker every FetchMaxWait.
	FetchMaxWait time.Duration `koanf:"fetch_max_wait"`
	// SessionTimeout is the consumer group session timeout (default 45s,
	// Kafka's): how long a crashed instance keeps its partitions before the
	// group moves them. The broker bounds it
	// (group.min/max.session.timeout.ms).
	SessionTimeout time.Duration `koanf:"session_timeout"`
	TLS            TLS           `koanf:"tls"`
	SASL           SASL          `koanf:"sasl"`
}

// InstanceIDOrHost is the instance id in effect: InstanceID, or
// flow.DefaultInstanceID (the host name with every character Kafka does not
// allow in a group.instance.id replaced by '-'; "localhost" when there is
// none).
func (k *Kafka) InstanceIDOrHost() string {
	if k.InstanceID != "" {
		return k.InstanceID
	}
	return flow.DefaultInstanceID()
}

// TLS configures the connection to the brokers.
type TLS struct {
	Enabled            bool   `koanf:"enabled"`
	CAFile             string `koanf:"ca_file"`
	CertFile           string `koanf:"cert_file"`
	KeyFile            string `koanf:"key_file"`
	InsecureSkipVerify bool   `koanf:"insecure_skip_verify"`
}

// SASL configures broker authentication. Mechanism is one of "" (none),
// "plain", "scram-sha-256", "scram-sha-512".
type SASL struct {
	Mechanism string `koanf:"mechanism"`
	Username  string `koanf:"username"`
	Password  string `koanf:"password"`
}

// Broker configures the embedded broker used when Kafka.Brokers is [embedded]
// and by `kretry broker`.
type Broker struct {
	// Listen is the host:port the broker listens on. Default 127.0.0.1:9092.
	Listen string `koanf:"listen"`
	// DataDir is where the broker persists its log. Default .kretry/data.
	// Empty after defaults only if set explicitly to "": memory only.
	DataDir string `koanf:"data_dir"`
	// Partitions is the partition count of topics the embedded broker
	// creates on its own (auto-created source topics). Default 3.
	Partitions int32 `koanf:"partitions"`
}

// App is the application kretry delivers to.
type App struct {
	// URL receives one POST per record (CloudEvents binary mode).
	URL string `koanf:"url"`
	// Timeout bounds one delivery (default 10s); a timeout is transient.
	Timeout time.Duration `koanf:"timeout"`
	// MaxInFlight bounds concurrent deliveries per topic (default 64), or
	// "auto": an adaptive limit (see InFlight and docs/OVERLOAD.md).
	MaxInFlight InFlight `koanf:"max_in_flight"`
	// MaxRate bounds the deliveries per topic, in records/s (first
	// attempts, retries and parked records together); 0, the default, is
	// no limit. Records wait in paused partitions, never dropped.
	MaxRate float64 `koanf:"max_rate"`
	// CEType is the ce-type attribute (default "kafka.record").
	CEType string `koanf:"ce_type"`
}

// Metrics configures the metrics and health endpoint.
type Metrics struct {
	// Listen is the host:port serving /metrics, /healthz and /readyz.
	// Default 127.0.0.1:9464; "" disables it.
	Listen string `koanf:"listen"`
	// PerPartition keeps the partition attribute on the lag, age and
	// status series (one series per group, topic and partition). false
	// aggregates them per topic (lag summed, age and status the worst of
	// the partitions) to bound cardinality. Default true.
	PerPartition bool `koanf:"per_partition"`
}

// Lag configures the lag monitor (package lag): the periodic scan behind
// the lag, age and status metrics, and `kretry lag`.
type Lag struct {
	// Interval is the time between two scans (default 30s); 0 turns the
	// monitor off in `kretry run` (`kretry lag` still scans on demand).
	Interval time.Duration `koanf:"interval"`
	// Timeout bounds each broker call of a scan (default 10s), so a stuck
	// broker delays a scan, never shutdown.
	Timeout time.Duration `koanf:"timeout"`
	// Window is how many scans the status looks back over (default 10, at
	// least 2): a consumer is judged stopped or stalled only after its
	// committed offset stood still, with lag, for the whole window. Make
	// Window × Interval longer than the longest commit interval of any
	// monitored group.
	Window int `koanf:"window"`
	// Groups are further consumer groups to monitor, such as the app's
	// own; kretry's groups (topics[].group) are always monitored.
	Groups []LagGroup `koanf:"groups"`
	// DLQGroup, when set, is a consumer group that drains the dead-letter
	// topics (a replay tool): records count as waiting in a DLQ from that
	// group's committed offset on. By default every record in a DLQ from
	// its log start on counts as waiting.
	DLQGroup string `koanf:"dlq_group"`
}

// LagGroup is one further consumer group for the lag monitor.
type LagGroup struct {
	// Name is the consumer group. Required.
	Name string `koanf:"name"`
	// ReadCommitted says the group reads with isolation.level
	// read_committed: its lag then ends at the last stable offset instead
	// of the high watermark. Default false (Kafka's default isolation).
	ReadCommitted bool `koanf:"read_committed"`
}

// Tracing configures OpenTelemetry tracing of deliveries (README,
// "Tracing"). Off, kretry still passes a record's traceparent and
// tracestate headers on to the app unchanged; on, each delivery attempt is
// a span, child of the producer's context, exported over OTLP/HTTP.
type Tracing struct {
	// Enabled turns the delivery spans on. Default false.
	Enabled bool `koanf:"enabled"`
	// OTLPEndpoint is the OTLP/HTTP collector, an http:// or https:// URL:
	// "http://otel-collector:4318" posts to /v1/traces, a URL with a path
	// posts to that path. Required when Enabled.
	OTLPEndpoint string `koanf:"otlp_endpoint"`
	// ServiceName is the service.name of the spans. Default "kretry".
	ServiceName string `koanf:"service_name"`
	// SampleRatio in [0, 1] is the fraction of traces kretry starts
	// itself (records without trace context) that are sampled; a record
	// with trace context follows its producer's sampling decision. Default
	// 1.
	SampleRatio float64 `koanf:"sample_ratio"`
}

// Log configures structured logging.
type Log struct {
	// Level is debug, info, warn or error (default info).
	Level string `koanf:"level"`
	// Format is text or json (default text).
	Format string `koanf:"format"`
}

// Topic configures one source topic.
type Topic struct {
	// Name is the source topic.
	Name string `koanf:"name"`
	// Group is the consumer group for the source and its tiers.
	// Default <name>-kretry.
	Group string `koanf:"group"`
	// Ordering is key (default), partition or none (flow.Ordering).
	Ordering flow.Ordering `koanf:"ordering"`
	// OnDeadLetter decides the fate of records parked behind a record that
	// was dead-lettered: release (default: deliver them, each with
	// kretry-gap-after naming the dead-lettered record), dead_letter (move
	// them to the DLQ too, in order) or hold (keep them parked until
	// `kretry parking release`). Only with ordering key or partition.
	// (flow.OnDeadLetter).
	OnDeadLetter flow.OnDeadLetter `koanf:"on_dead_letter"`
	Retry        Retry             `koanf:"retry"`
	DLQ          DLQ               `koanf:"dlq"`
	Parking      Parking           `koanf:"parking"`
	Classify     Classify          `koanf:"classify"`
	// MaxAge expires records: a record whose timestamp (the original
	// record's, as in ce-time and kretry-original-timestamp) is older than
	// MaxAge when its delivery is due is not delivered but handled as
	// OnExpired says. 0, the default, never expires a record.
	MaxAge time.Duration `koanf:"max_age"`
	// OnExpired is dead_letter (default: the DLQ, kretry-error-class
	// "expired") or drop (committed past, counted, written nowhere).
	OnExpired string `koanf:"on_expired"`
	// Breaker and Guard stop delivery while the dependency is down or
	// answers every record with the same permanent failure (see overload.go).
	Breaker Breaker `koanf:"breaker"`
	Guard   Guard   `koanf:"guard"`
}

// Parking configures the parking topic of one source topic (ordering key
// or partition).
type Parking struct {
	// Topic defaults to <name>.parking.
	Topic string `koanf:"topic"`
	// MaxRecords bounds the parked records per partition (default 10000,
	// also when 0: parking is never unbounded).
	// At the bound the source partition pauses until parked records are
	// released: back-pressure, never a drop.
	MaxRecords int `koanf:"max_records"`
}

// Retry configures the retry tiers of one topic.
type Retry struct {
	// Tiers are the delays of the retry topics, strictly increasing, each
	// at least 1ms. Default [1m, 10m, 1h]. An empty list sends transient
	// failures straight to the DLQ as exhausted.
	Tiers []time.Duration `koanf:"tiers"`
	// Jitter in [0, 1]: each delay d is stretched by a uniform random
	// fraction in [0, jitter·d). Default 0.2.
	Jitter *float64 `koanf:"jitter"`
	// Topics overrides the tier topic names, one per tier. Default
	// <name>.retry.<tier> (for example orders.retry.1m).
	Topics []string `koanf:"topics"`
	// Budget caps retries as a share of deliveries; off by default.
	Budget RetryBudget `koanf:"budget"`
}

// DLQ configures the dead-letter topic.
type DLQ struct {
	// Topic defaults to <name>.dlq.
	Topic string `koanf:"topic"`
	// Retention is the retention.ms kretry gives the DLQ when it creates
	// it. Default 0: twice the source's retention, at least 14 days (a
	// source kept forever gives a DLQ kept forever); a negative duration
	// (-1ms) keeps records forever; whole milliseconds only. An existing
	// DLQ is not changed, but kretry run warns when it keeps records for
	// less time than its source and than this.
	Retention time.Duration `koanf:"retention"`
}

// Classify lists the HTTP statuses with a fixed route. A status in neither
// list, other than 2xx, is transient and logged once.
type Classify struct {
	// Permanent statuses go to the DLQ at once.
	// Default 400, 404, 409, 410, 413, 415, 422.
	Permanent []int `koanf:"permanent"`
	// Transient statuses go to the next retry tier.
	// Default 408, 425, 429, 500, 502, 503, 504.
	Transient []int `koanf:"transient"`
}

// Plan is the retry plan of a defaulted topic (SetDefaults): its source,
// its tiers (retry.tiers named by retry.topics), its DLQ and its jitter.
// The engine (Config.EngineOptions) and the lag monitor
// (lag.FromConfig) both read the topic's stages from it, so neither derives
// a name or a wait of its own.
func (t *Topic) Plan() retrytopics.Plan {
	p := retrytopics.Plan{Source: t.Name, DLQ: t.DLQ.Topic, DLQRetention: t.DLQ.Retention}
	if t.Retry.Jitter != nil {
		p.Jitter = *t.Retry.Jitter
	}
	for i, d := range t.Retry.Tiers {
		name := retrytopics.TierTopic(t.Name, d)
		if i < len(t.Retry.Topics) {
			name = t.Retry.Topics[i]
		}
		p.Tiers = append(p.Tiers, retrytopics.Tier{Topic: name, Delay: d})
	}
	return p
}

// Statuses are the topic's classify lists as delivery.Statuses.
func (t *Topic) Statuses() delivery.Statuses {
	return delivery.Statuses{Permanent: t.Classify.Permanent, Transient: t.Classify.Transient}
}
