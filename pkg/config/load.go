package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
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
	ko := koanf.New(".")
	if err := ko.Load(rawbytes.Provider(yamlBytes), yaml.Parser()); err != nil {
		return nil, syntaxError(yamlBytes, err)
	}

	envs := make(envPaths)
	if len(environ) > 0 {
		p := env.Provider(".", env.Opt{
			Prefix:        EnvPrefix,
			TransformFunc: envs.transform,
			EnvironFunc:   func() []string { return environ },
		})
		if err := ko.Load(p, nil, koanf.WithMergeFunc(envs.merge)); err != nil {
			return nil, err
		}
	}

	c := Default()
	raw := ko.Raw()
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
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

// envPaths maps the dotted koanf path of each override (app.max_in_flight,
// topics.0.name) to the variable that set it.
type envPaths map[string]string

// transform turns KRETRY_APP__MAX_IN_FLIGHT into app.max_in_flight.
func (e envPaths) transform(name, value string) (string, any) {
	if name == EnvConfigFile || strings.HasPrefix(name, EnvTestPrefix) {
		return "", nil
	}
	path := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, EnvPrefix), "__", "."))
	if path == "" {
		return "", nil
	}
	e[path] = name
	return path, value
}

// merge lays the environment map (src) over the file (dest). Unlike
// koanf's default merge it descends into lists: a numeric path element
// indexes the list (KRETRY_TOPICS__0__GROUP) or, when it is the next free
// index, appends to it.
func (e envPaths) merge(src, dest map[string]any) error {
	var errs []error
	for k, v := range src {
		merged, err := e.mergeValue(k, dest[k], v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dest[k] = merged
	}
	return errors.Join(errs...)
}

func (e envPaths) mergeValue(path string, dst, src any) (any, error) {
	sm, ok := src.(map[string]any)
	if !ok {
		return src, nil
	}
	switch d := dst.(type) {
	case map[string]any:
		var errs []error
		for k, v := range sm {
			merged, err := e.mergeValue(path+"."+k, d[k], v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			d[k] = merged
		}
		return d, errors.Join(errs...)
	case []any:
		return e.mergeList(path, d, sm)
	case nil:
		if isIndexMap(sm) {
			return e.mergeList(path, nil, sm)
		}
		return e.mergeValue(path, map[string]any{}, sm)
	}
	return src, nil
}

func isIndexMap(m map[string]any) bool {
	for k := range m {
		if _, err := strconv.Atoi(k); err != nil {
			return false
		}
	}
	return len(m) > 0
}

func (e envPaths) mergeList(path string, dst []any, src map[string]any) (any, error) {
	idx := make([]int, 0, len(src))
	for k := range src {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || k != strconv.Itoa(i) {
			p := path + "." + k
			return nil, &FieldError{Path: displayPath(p), Msg: fmt.Sprintf("%q is not a list index", k), Env: e.find(p)}
		}
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := slices.Clone(dst)
	var errs []error
	for _, i := range idx {
		k := strconv.Itoa(i)
		p := path + "." + k
		if i > len(out) {
			errs = append(errs, &FieldError{
				Path: displayPath(p),
				Msg:  fmt.Sprintf("index %d is past the end of the list (length %d)", i, len(out)),
				Env:  e.find(p),
			})
			continue
		}
		var cur any
		if i < len(out) {
			cur = out[i]
		}
		merged, err := e.mergeValue(p, cur, src[k])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if i == len(out) {
			out = append(out, merged)
		} else {
			out[i] = merged
		}
	}
	return out, errors.Join(errs...)
}

// find returns the variable that set the dotted path, one of its parents
// (a list split from one string) or, failing that, its children (a key
// unknown as a whole), joined with ", ".
func (e envPaths) find(dotted string) string {
	if dotted == "" {
		return ""
	}
	for p := dotted; ; {
		if name, ok := e[p]; ok {
			return name
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	var names []string
	for p, name := range e {
		if strings.HasPrefix(p, dotted+".") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// dottedPath turns topics[0].retry into topics.0.retry (koanf's form).
func dottedPath(p string) string {
	p = strings.ReplaceAll(p, "[", ".")
	p = strings.ReplaceAll(p, "]", "")
	return strings.TrimPrefix(p, ".")
}

// displayPath turns topics.0.retry into topics[0].retry.
func displayPath(dotted string) string {
	var b strings.Builder
	for i, s := range strings.Split(dotted, ".") {
		if _, err := strconv.Atoi(s); err == nil && i > 0 {
			b.WriteString("[" + s + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// annotate adds the environment variable to each *FieldError in a join.
func annotate(err error, envs envPaths) error {
	if len(envs) == 0 {
		return err
	}
	for _, e := range unwrapJoin(err) {
		var fe *FieldError
		if errors.As(e, &fe) && fe.Env == "" && fe.Path != "" {
			fe.Env = envs.findExact(dottedPath(fe.Path))
		}
	}
	return err
}

// findExact is find without the children: a Validate error about a list
// (kafka.brokers) should name the variable that set the list but not one
// that set only a sibling.
func (e envPaths) findExact(dotted string) string {
	for p := dotted; ; {
		if name, ok := e[p]; ok {
			return name
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return ""
		}
		p = p[:i]
	}
}

var durationType = reflect.TypeOf(time.Duration(0))

// rootName is what mapstructure calls the top level of the config in an
// error since v2.5.0: "config.Config".
var rootName = reflect.TypeOf(Config{}).String()

// valueError is a decode hook failure; decodeErrors adds the path.
type valueError struct {
	value string
	msg   string
}

func (e *valueError) Error() string { return fmt.Sprintf("%q %s", e.value, e.msg) }

// stringToSliceHook splits a string on commas where a list is expected,
// trimming spaces around each element; "" is the empty list. This is how
// KRETRY_KAFKA__BROKERS=a:9092,b:9092 becomes a list. (mapstructure's
// StringToSliceHookFunc only targets []string and keeps the spaces.)
func stringToSliceHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to.Kind() != reflect.Slice || to.Elem().Kind() == reflect.Uint8 {
		return data, nil
	}
	s := strings.TrimSpace(reflect.ValueOf(data).String())
	if s == "" {
		return []string{}, nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts, nil
}

// stringToDurationHook parses time.ParseDuration strings ("1m", "250ms")
// and rejects bare numbers, which mapstructure would take as nanoseconds.
// It replaces mapstructure's StringToTimeDurationHookFunc, whose error
// drops the bad value.
func stringToDurationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch from.Kind() {
	case reflect.String:
		s := reflect.ValueOf(data).String()
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, &valueError{value: s, msg: `is not a duration: use a Go duration such as "10s", "1m30s" or "250ms"`}
		}
		return d, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if from == durationType {
			return data, nil
		}
		return nil, &valueError{value: fmt.Sprint(data), msg: `is not a duration: it needs a unit, as in "10s" or "250ms"`}
	}
	return data, nil
}

// numberToIntHook rejects fractions and out-of-range numbers where an
// integer is expected (mapstructure truncates 8.5 to 8 and wraps around).
func numberToIntHook(from, to reflect.Type, data any) (any, error) {
	if to == durationType {
		return data, nil
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
	default:
		return data, nil
	}
	v := reflect.ValueOf(data)
	switch from.Kind() {
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, &valueError{value: fmt.Sprint(data), msg: "is not an integer"}
		}
		if f < math.MinInt64 || f >= math.MaxInt64 || reflect.Zero(to).OverflowInt(int64(f)) {
			return nil, &valueError{value: fmt.Sprint(data), msg: "is out of range"}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if reflect.Zero(to).OverflowInt(v.Int()) {
			return nil, &valueError{value: fmt.Sprint(data), msg: "is out of range"}
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if u := v.Uint(); u > math.MaxInt64 || reflect.Zero(to).OverflowInt(int64(u)) {
			return nil, &valueError{value: fmt.Sprint(data), msg: "is out of range"}
		}
	}
	return data, nil
}

// decodeErrors rewrites mapstructure's error tree into one *FieldError per
// problem, in decode order: "app.urll: unknown key",
// `topics[0].retry.tiers[1]: "5x" is not a duration`.
func decodeErrors(err error, raw map[string]any, envs envPaths) []error {
	var out []error
	add := func(path, msg string) {
		out = append(out, &FieldError{Path: path, Msg: msg, Env: envs.find(dottedPath(path))})
	}
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *mapstructure.DecodeError:
			inner := e.Unwrap()
			if _, ok := inner.(interface{ Unwrap() []error }); ok {
				walk(inner)
				return
			}
			if _, ok := inner.(*mapstructure.DecodeError); ok {
				walk(inner)
				return
			}
			name := e.Name()
			if name == rootName {
				// mapstructure v2.5.0 names the root by its type in
				// "has invalid keys" (v2.4.0 left it empty).
				name = ""
			}
			var (
				ve *valueError
				pe *mapstructure.ParseError
				ue *mapstructure.UnconvertibleTypeError
			)
			switch {
			case strings.HasPrefix(inner.Error(), "has invalid keys: "):
				keys, valid := unknownKeys(raw, name, inner.Error())
				for _, k := range keys {
					path := joinPath(name, k)
					msg := "unknown key"
					if m := closest(k, valid); m != "" {
						if v := envs.find(dottedPath(path)); v != "" && !strings.Contains(v, ", ") && strings.HasSuffix(v, strings.ToUpper(k)) {
							m = strings.TrimSuffix(v, strings.ToUpper(k)) + strings.ToUpper(m) // KRETRY_APP__URLL: KRETRY_APP__URL
						} else {
							m = strconv.Quote(m)
						}
						msg += ", did you mean " + m + "?"
					}
					add(path, msg)
				}
			case strings.HasPrefix(inner.Error(), "expected a map or struct, got "):
				got := "a " + strings.Trim(strings.TrimPrefix(inner.Error(), "expected a map or struct, got "), `"`)
				if v, ok := rawAt(raw, name); ok {
					got = valueNoun(v)
				}
				add(name, "expected a mapping, got "+got)
			case errors.As(inner, &ve):
				add(name, ve.Error())
			case errors.As(inner, &pe):
				msg := "is not " + typeNoun(pe.Expected.Type())
				if errors.Is(pe.Err, strconv.ErrRange) {
					msg = "is out of range"
				}
				add(name, fmt.Sprintf("%q %s", fmt.Sprint(pe.Value), msg))
			case errors.As(inner, &ue):
				add(name, fmt.Sprintf("expected %s, got %s", typeNoun(ue.Expected.Type()), valueNoun(ue.Value)))
			default:
				add(name, inner.Error())
			}
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		default:
			if u := errors.Unwrap(err); u != nil {
				walk(u)
				return
			}
			out = append(out, err)
		}
	}
	walk(err)
	return out
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// unknownKeys lists the keys of the raw mapping at path that match no
// field of the struct decoded there, and the keys valid there. It walks the
// data rather than parse mapstructure's comma-joined message, which is the
// fallback (without valid keys).
func unknownKeys(raw map[string]any, path, msg string) (unknown, valid []string) {
	if keys, valid, ok := unknownAt(raw, path); ok && len(keys) > 0 {
		return keys, valid
	}
	return strings.Split(strings.TrimPrefix(msg, "has invalid keys: "), ", "), nil
}

func unknownAt(raw map[string]any, path string) (unknown, valid []string, ok bool) {
	var (
		v any = raw
		t     = reflect.TypeOf(Config{})
	)
	if path != "" {
		for _, seg := range strings.Split(dottedPath(path), ".") {
			if i, err := strconv.Atoi(seg); err == nil {
				l, ok := v.([]any)
				if !ok || i >= len(l) || t.Kind() != reflect.Slice {
					return nil, nil, false
				}
				v, t = l[i], t.Elem()
				continue
			}
			m, ok := v.(map[string]any)
			if !ok || t.Kind() != reflect.Struct {
				return nil, nil, false
			}
			f, ok := fieldByTag(t, seg)
			if !ok {
				return nil, nil, false
			}
			v, t = m[seg], f.Type
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m, ok := v.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return nil, nil, false
	}
	for k := range m {
		if _, ok := fieldByTag(t, k); !ok {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("koanf"); tag != "" {
			valid = append(valid, tag)
		}
	}
	return unknown, valid, true
}

// closest returns the valid key nearest to key, compared in lower case by
// edit distance (Damerau-Levenshtein, optimal string alignment: a swap of
// two adjacent letters counts one), if it is near enough to be a typo: at
// most a third of the shorter key's length, at least one edit. Ties go to
// the earlier key in valid.
// Closest returns the name in valid nearest to name, for a "did you
// mean" hint (a config key, a command's flag); "" when none is near: an
// edit distance of at most a third of the shorter name, and at least 1.
func Closest(name string, valid []string) string { return closest(name, valid) }

func closest(key string, valid []string) string {
	best, bestD := "", -1
	for _, v := range valid {
		d := editDistance(strings.ToLower(key), v)
		if d <= max(1, min(len(key), len(v))/3) && (bestD < 0 || d < bestD) {
			best, bestD = v, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and adjacent transpositions, bytes.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// rawAt returns the raw value at a decode path, if the path leads through
// mappings and lists of the raw data.
func rawAt(raw map[string]any, path string) (any, bool) {
	var v any = raw
	for _, seg := range strings.Split(dottedPath(path), ".") {
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[seg]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("koanf") == tag {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func typeNoun(t reflect.Type) string {
	if t == durationType {
		return "a duration"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeNoun(t.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping"
	}
	return t.String()
}

func valueNoun(v any) string {
	switch reflect.ValueOf(v).Kind() {
	case reflect.Invalid:
		return "null"
	case reflect.Map:
		return "a mapping"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return strconv.Quote(fmt.Sprint(v))
}
