package config

import (
	"errors"
	"os"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"

	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// EnvPrefix starts every environment variable that overrides a config key.
const EnvPrefix = "KRETRY_"

// EnvConfigFile is reserved for the command line (the path of the config
// file). It is the one KRETRY_ variable that is not a config key; every
// other KRETRY_ variable must name a known key.
const EnvConfigFile = "KRETRY_CONFIG"

// EnvTestPrefix starts the variables of kretry's own test suites
// (KRETRY_TEST_BROKER, KRETRY_TEST_LOG, …); they are never config keys.
const EnvTestPrefix = "KRETRY_TEST_"

// Default values, as documented on the fields of Config.
const (
	DefaultClientID        = "kretry"
	DefaultTransactionalID = flow.DefaultTransactionalIDPrefix
	DefaultFetchMaxWait    = flow.DefaultFetchMaxWait
	DefaultSessionTimeout  = 45 * time.Second
	DefaultEmbeddedListen  = "127.0.0.1:9092"
	DefaultEmbeddedDataDir = ".kretry/data"
	DefaultPartitions      = 3
	DefaultAppTimeout      = flow.DefaultDeliveryTimeout
	DefaultMaxInFlight     = flow.DefaultMaxInFlight
	DefaultCEType          = "kafka.record"
	DefaultMetricsListen   = "127.0.0.1:9464"
	DefaultLagInterval     = 30 * time.Second
	DefaultLagTimeout      = 10 * time.Second
	DefaultLagWindow       = 10
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "text"
	DefaultJitter          = flow.DefaultJitter
	DefaultServiceName     = "kretry"
	DefaultSampleRatio     = 1.0
	// DefaultMaxParked is parking.max_records when absent (records per
	// partition).
	DefaultMaxParked = flow.DefaultMaxParked
	// DefaultGroupSuffix makes the default consumer group <name>-kretry.
	DefaultGroupSuffix = flow.DefaultGroupSuffix
)

// DefaultTiers are the retry delays of a topic whose retry.tiers key is
// absent: flow.DefaultTiers, [1m, 10m, 1h]. The result is a fresh slice.
func DefaultTiers() []time.Duration { return flow.DefaultTiers() }

// DefaultPermanent are the statuses that go to the DLQ at once when
// classify.permanent is absent: flow.DefaultPermanent, 400, 404, 409, 410,
// 413, 415, 422. A fresh slice.
func DefaultPermanent() []int { return flow.DefaultPermanent() }

// DefaultTransient are the statuses that go to the next retry tier when
// classify.transient is absent: flow.DefaultTransient, 408, 425, 429, 500,
// 502, 503, 504. A fresh slice.
func DefaultTransient() []int { return flow.DefaultTransient() }

// Default returns a Config holding every default that does not depend on
// another field: brokers [embedded], client and transactional ID "kretry",
// fetch_max_wait 50ms, the embedded broker on 127.0.0.1:9092 with data in
// .kretry/data and 3 partitions, app timeout 10s, 64 deliveries in flight,
// ce-type "kafka.record", metrics on 127.0.0.1:9464 per partition, log level
// info in text format, a lag scan every 30s with a 10s timeout per broker
// call and a status window of 10 scans, tracing off (service name
// "kretry", sample ratio 1). It has no topics and no app URL.
//
// Parse decodes the file over Default(), so a key that is absent keeps its
// default while a key that is present, even as 0 or "", replaces it (and
// Validate then judges the value). Go programs that build a Config in code
// start from Default() too, then call SetDefaults and Validate.
func Default() *Config {
	return &Config{
		Kafka: Kafka{
			Brokers:         []string{Embedded},
			ClientID:        DefaultClientID,
			TransactionalID: DefaultTransactionalID,
			FetchMaxWait:    DefaultFetchMaxWait,
			SessionTimeout:  DefaultSessionTimeout,
		},
		Embedded: Broker{
			Listen:     DefaultEmbeddedListen,
			DataDir:    DefaultEmbeddedDataDir,
			Partitions: DefaultPartitions,
		},
		App: App{
			Timeout:     DefaultAppTimeout,
			MaxInFlight: DefaultMaxInFlight,
			CEType:      DefaultCEType,
		},
		Metrics: Metrics{Listen: DefaultMetricsListen, PerPartition: true},
		Log:     Log{Level: DefaultLogLevel, Format: DefaultLogFormat},
		Lag:     Lag{Interval: DefaultLagInterval, Timeout: DefaultLagTimeout, Window: DefaultLagWindow},
		Tracing: Tracing{ServiceName: DefaultServiceName, SampleRatio: DefaultSampleRatio},
		Admin:   Admin{Listen: DefaultAdminListen},
	}
}

// SetDefaults fills the defaults that depend on other fields or whose
// absence shows as a nil value. It is idempotent, and Parse calls it. It
// sets
//
//   - kafka.brokers to [embedded] when nil (an empty non-nil list stays
//     empty, and Validate rejects it);
//   - per topic: group to <name>-kretry and ordering to flow.DefaultOrdering
//     ("key") when "";
//     retry.tiers to DefaultTiers when nil (an explicit empty list means no
//     tiers: transient failures go to the DLQ as exhausted); retry.jitter to
//     0.2 when nil; retry.topics to retrytopics.TierTopic(name, tier) for
//     each tier when nil; dlq.topic to retrytopics.DLQTopic(name) when "";
//     classify.permanent and classify.transient to DefaultPermanent and
//     DefaultTransient when nil; the overload keys (max_age, on_expired,
//     breaker, guard, retry.budget) as overload.go says.
//
// Scalar defaults (timeouts, listen addresses, …) are not filled here
// because a zero there may be explicit ("" disables metrics); they come
// from Default.
func (c *Config) SetDefaults() {
	if c.Kafka.Brokers == nil {
		c.Kafka.Brokers = []string{Embedded}
	}
	for i := range c.Topics {
		t := &c.Topics[i]
		if t.Group == "" {
			t.Group = t.Name + DefaultGroupSuffix
		}
		if t.Ordering == "" {
			t.Ordering = flow.DefaultOrdering
		}
		if t.OnDeadLetter == "" {
			t.OnDeadLetter = flow.DefaultOnDeadLetter
		}
		if t.Parking.Topic == "" {
			t.Parking.Topic = retrytopics.ParkingTopic(t.Name)
		}
		if t.Parking.MaxRecords == 0 {
			t.Parking.MaxRecords = DefaultMaxParked
		}
		if t.Retry.Tiers == nil {
			t.Retry.Tiers = DefaultTiers()
		}
		if t.Retry.Jitter == nil {
			j := DefaultJitter
			t.Retry.Jitter = &j
		}
		if t.Retry.Topics == nil {
			t.Retry.Topics = make([]string, len(t.Retry.Tiers))
			for k, d := range t.Retry.Tiers {
				t.Retry.Topics[k] = retrytopics.TierTopic(t.Name, d)
			}
		}
		if t.DLQ.Topic == "" {
			t.DLQ.Topic = retrytopics.DLQTopic(t.Name)
		}
		if t.Classify.Permanent == nil {
			t.Classify.Permanent = DefaultPermanent()
		}
		if t.Classify.Transient == nil {
			t.Classify.Transient = DefaultTransient()
		}
		t.setOverloadDefaults()
	}
}

// Load reads the YAML file at path and returns Parse(file, os.Environ()).
// Errors from reading the file name the file; the others are Parse's.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(b, os.Environ())
}

// Parse builds a Config from YAML bytes and environment variables (in
// os.Environ form, "NAME=value"; nil means none), in this order:
//
//  1. the YAML is decoded over Default() (see the package doc for the
//     KRETRY_ override rule); unknown keys, values of the wrong type and
//     bad durations fail here, but the keys that decode are still
//     checked by the steps below;
//  2. SetDefaults fills the derived defaults;
//  3. Validate checks the result.
//
// It returns the Config only if all three succeed. Otherwise the error is
// an errors.Join of *FieldError, one per problem, each printing as
// "path: message" (plus " (from KRETRY_…)" when an environment variable
// set the key): the decoding errors first, then Validate's about the keys
// that did decode. A YAML syntax error is returned alone, as a
// *SyntaxError ("parse YAML: line N: …").
func Parse(yamlBytes []byte, environ []string) (*Config, error) {
	ko, envs, err := load(yamlBytes, environ)
	if err != nil {
		return nil, err
	}

	c := Default()
	raw := ko.Raw()
	dec, err := newDecoder(c)
	if err != nil {
		return nil, err
	}
	var decodeErrs []error
	if err := dec.Decode(raw); err != nil {
		decodeErrs = decodeErrors(err, raw, envs)
	}

	// Validate even when decoding failed, so that one bad value does not
	// hide the other problems; a key that failed to decode holds its
	// default or zero, so what Validate says about it (or about what
	// contains it or depends on it) is left out.
	c.SetDefaults()
	errs := decodeErrs
	if err := c.Validate(); err != nil {
		for _, e := range unwrapJoin(annotate(err, envs)) {
			if !affected(e, decodeErrs) {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// load merges the YAML document yamlBytes and the KRETRY_ overrides in
// environ into one koanf tree. It returns the tree and the koanf path of
// each override, a *SyntaxError when the YAML does not parse, and the
// overrides' merge errors.
func load(yamlBytes []byte, environ []string) (*koanf.Koanf, envPaths, error) {
	ko := koanf.New(".")
	if err := ko.Load(rawbytes.Provider(yamlBytes), yaml.Parser()); err != nil {
		return nil, nil, syntaxError(yamlBytes, err)
	}

	envs := make(envPaths)
	if len(environ) > 0 {
		p := env.Provider(".", env.Opt{
			Prefix:        EnvPrefix,
			TransformFunc: envs.transform,
			EnvironFunc:   func() []string { return environ },
		})
		if err := ko.Load(p, nil, koanf.WithMergeFunc(envs.merge)); err != nil {
			return nil, nil, err
		}
	}
	return ko, envs, nil
}

// newDecoder is the strict decoder of a koanf tree into c: unknown keys
// are errors, names match exactly, and strings, durations and
// app.max_in_flight decode through the hooks.
func newDecoder(c *Config) (*mapstructure.Decoder, error) {
	return mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName: "koanf",
		// koanf's default decoder ignores keys it does not know; a typo
		// must fail instead.
		ErrorUnused: true,
		// Environment values are strings: "8" must decode into an int.
		WeaklyTypedInput: true,
		// Keys match exactly: "URL" is not "url".
		MatchName: func(key, field string) bool { return key == field },
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			stringToSliceHook,
			stringToDurationHook,
			inFlightNumberHook, // before inFlightHook, which gives auto as -1
			inFlightHook,
			numberToIntHook,
		),
		Result: c,
	})
}

func unwrapJoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// affected reports whether the validation error e is about a key that
// failed to decode, one inside it or one containing it, or about the tier
// topic names of a topic whose tiers failed to decode (they are derived
// from the tiers).
func affected(e error, decodeErrs []error) bool {
	var fe *FieldError
	if !errors.As(e, &fe) {
		return false
	}
	for _, d := range decodeErrs {
		var de *FieldError
		if !errors.As(d, &de) {
			return true // not tied to a key: it may affect any of them
		}
		if related(fe.Path, de.Path) {
			return true
		}
		if i := strings.Index(de.Path, ".retry.tiers"); i >= 0 && related(fe.Path, de.Path[:i]+".retry.topics") {
			return true
		}
	}
	return false
}

// related reports whether key path a is b, inside b or contains b, by
// whole segments: app.url is not related to app.urll.
func related(a, b string) bool {
	inside := func(x, y string) bool {
		return y == "" || x == y || strings.HasPrefix(x, y+".") || strings.HasPrefix(x, y+"[")
	}
	return inside(a, b) || inside(b, a)
}

// FieldError is one problem with one config key. Validate and Parse
// return errors.Join of them.
type FieldError struct {
	// Path is the key path in YAML terms: topics[0].retry.tiers[2].
	Path string
	// Msg says what is wrong and quotes the bad value.
	Msg string
	// Env is the environment variable that set the key, "" when the value
	// came from the file (or from code).
	Env string
}

func (e *FieldError) Error() string {
	s := e.Msg
	if e.Path != "" {
		s = e.Path + ": " + s
	}
	if e.Env != "" {
		s += " (from " + e.Env + ")"
	}
	return s
}
