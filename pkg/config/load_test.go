package config_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/flow"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.err from the current errors")

// minimal is the smallest valid config: everything else is a default.
const minimal = `
app: {url: http://127.0.0.1:8080/kafka}
topics:
  - name: orders
`

// TestBadConfigs parses each testdata/bad/<name>.yaml (with the variables
// of <name>.env, if any) and wants exactly the text of <name>.err.
func TestBadConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found %d bad configs, want at least 20", len(files))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			yamlBytes, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			environ := readEnv(t, strings.TrimSuffix(file, ".yaml")+".env")
			c, err := config.Parse(yamlBytes, environ)
			if err == nil {
				t.Fatalf("Parse succeeded, want an error; got %+v", c)
			}
			if c != nil {
				t.Errorf("Parse returned a Config with its error")
			}
			errFile := strings.TrimSuffix(file, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(errFile, []byte(err.Error()+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, rerr := os.ReadFile(errFile)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if got, want := err.Error(), strings.TrimRight(string(want), "\n"); got != want {
				t.Errorf("error mismatch\ngot:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func readEnv(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	return env
}

// TestEveryErrHasYAML catches a .err or .env left without its config.
func TestEveryErrHasYAML(t *testing.T) {
	for _, ext := range []string{".err", ".env"} {
		files, _ := filepath.Glob("testdata/bad/*" + ext)
		for _, f := range files {
			if _, err := os.Stat(strings.TrimSuffix(f, ext) + ".yaml"); err != nil {
				t.Errorf("%s has no .yaml", f)
			}
		}
	}
}

func wantDefaults(t *testing.T, c *config.Config) {
	t.Helper()
	jitter := 0.2
	on := true
	tenPerSecond := 10.0
	want := &config.Config{
		Kafka: config.Kafka{
			Brokers:         []string{"embedded"},
			ClientID:        "kretry",
			TransactionalID: "kretry",
			FetchMaxWait:    50 * time.Millisecond,
			SessionTimeout:  45 * time.Second,
		},
		Embedded: config.Broker{Listen: "127.0.0.1:9092", DataDir: ".kretry/data", Partitions: 3},
		App: config.App{
			URL:         "http://127.0.0.1:8080/kafka",
			Timeout:     10 * time.Second,
			MaxInFlight: 64,
			CEType:      "kafka.record",
		},
		Metrics: config.Metrics{Listen: "127.0.0.1:9464", PerPartition: true},
		Log:     config.Log{Level: "info", Format: "text"},
		Lag:     config.Lag{Interval: 30 * time.Second, Timeout: 10 * time.Second, Window: 10},
		Tracing: config.Tracing{ServiceName: "kretry", SampleRatio: 1},
		Admin:   config.Admin{Listen: "127.0.0.1:9465"},
		Topics: []config.Topic{{
			Name:         "orders",
			Group:        "orders-kretry",
			Ordering:     "key",
			OnDeadLetter: "release",
			Retry: config.Retry{
				Tiers:  []time.Duration{time.Minute, 10 * time.Minute, time.Hour},
				Jitter: &jitter,
				Topics: []string{"orders.retry.1m", "orders.retry.10m", "orders.retry.1h"},
				Budget: config.RetryBudget{MinPerSecond: &tenPerSecond, Window: 10 * time.Second},
			},
			DLQ:     config.DLQ{Topic: "orders.dlq"},
			Parking: config.Parking{Topic: "orders.parking", MaxRecords: 10000},
			Classify: config.Classify{
				Permanent: []int{400, 404, 409, 410, 413, 415, 422},
				Transient: []int{408, 425, 429, 500, 502, 503, 504},
			},
			OnExpired: "dead_letter",
			Breaker:   config.Breaker{Enabled: &on, Window: 20, FailureRatio: 0.5, Wait: time.Second, MaxWait: time.Minute, Probes: 3},
			Guard:     config.Guard{Enabled: &on, MaxDeadLetters: 10, Window: time.Minute, Share: 0.9},
		}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\ngot  %+v\nwant %+v", c, want)
		if len(c.Topics) == 1 {
			t.Errorf("topic:\ngot  %+v\nwant %+v", c.Topics[0], want.Topics[0])
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := config.Parse([]byte(minimal), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDefaults(t, c)
}

// TestNullKeepsDefault: a key written without a value is absent.
func TestNullKeepsDefault(t *testing.T) {
	c, err := config.Parse([]byte(minimal+`
    retry: {tiers: , jitter: }
metrics: {listen: }
kafka: {brokers: }
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantDefaults(t, c)
}

// TestExplicitEmpty: a key that is present replaces the default, even
// when empty.
func TestExplicitEmpty(t *testing.T) {
	c, err := config.Parse([]byte(`
app: {url: https://app.example/kafka}
metrics: {listen: ""}
embedded: {data_dir: ""}
topics:
  - name: orders
    retry: {tiers: [], jitter: 0}
    classify: {permanent: [], transient: [503]}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Metrics.Listen != "" {
		t.Errorf("metrics.listen = %q, want disabled", c.Metrics.Listen)
	}
	if c.Embedded.DataDir != "" {
		t.Errorf("embedded.data_dir = %q, want memory only", c.Embedded.DataDir)
	}
	r := c.Topics[0].Retry
	if r.Tiers == nil || len(r.Tiers) != 0 || len(r.Topics) != 0 {
		t.Errorf("retry = %+v, want no tiers and no tier topics", r)
	}
	if *r.Jitter != 0 {
		t.Errorf("jitter = %v, want 0", *r.Jitter)
	}
	cl := c.Topics[0].Classify
	if len(cl.Permanent) != 0 || !reflect.DeepEqual(cl.Transient, []int{503}) {
		t.Errorf("classify = %+v", cl)
	}
}

func TestExplicitValues(t *testing.T) {
	c, err := config.Parse([]byte(`
kafka:
  brokers: ["kafka-0:9092", "kafka-1:9092"]
  tls: {enabled: true, ca_file: testdata/tls/ca.pem, cert_file: testdata/tls/client.pem, key_file: testdata/tls/client-key.pem}
  sasl: {mechanism: scram-sha-256, username: kretry, password: secret}
app: {url: http://app:8080/kafka, timeout: 1m30s, max_in_flight: 8}
log: {level: debug, format: json}
topics:
  - name: orders
    group: shop
    retry: {tiers: [100ms, 1s, 1m30s]}
    dlq: {topic: orders.dead}
  - name: payments
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Topics[0].Retry.Topics; !reflect.DeepEqual(got, []string{"orders.retry.100ms", "orders.retry.1s", "orders.retry.1m30s"}) {
		t.Errorf("tier topics = %q", got)
	}
	if c.Topics[0].Group != "shop" || c.Topics[0].DLQ.Topic != "orders.dead" {
		t.Errorf("topic 0 = %+v", c.Topics[0])
	}
	if c.Topics[1].Group != "payments-kretry" || c.Topics[1].DLQ.Topic != "payments.dlq" {
		t.Errorf("topic 1 = %+v", c.Topics[1])
	}
	if c.App.Timeout != 90*time.Second || c.App.MaxInFlight != 8 {
		t.Errorf("app = %+v", c.App)
	}
}

func TestFieldError(t *testing.T) {
	_, err := config.Parse([]byte(minimal), []string{"KRETRY_APP__URLL=x"})
	var fe *config.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a *FieldError", err)
	}
	if fe.Path != "app.urll" || fe.Msg != "unknown key, did you mean KRETRY_APP__URL?" || fe.Env != "KRETRY_APP__URLL" {
		t.Errorf("FieldError = %+v", fe)
	}
}

// TestSingleUnderscoreEnvVar: a variable with _ where a level needs __
// is answered with the spelling that sets the key (a newcomer's
// KRETRY_APP_URL got "unknown key" and no hint).
func TestSingleUnderscoreEnvVar(t *testing.T) {
	for env, want := range map[string]string{
		"KRETRY_APP_URL=x":            "app_url: unknown key, did you mean KRETRY_APP__URL? (__ separates a key's levels, _ joins the words of one) (from KRETRY_APP_URL)",
		"KRETRY_APP_MAX_IN_FLIGHT=8":  "app_max_in_flight: unknown key, did you mean KRETRY_APP__MAX_IN_FLIGHT?",
		"KRETRY_APP__TIMEOUT_MS=1000": "app.timeout_ms: unknown key (from KRETRY_APP__TIMEOUT_MS)",
	} {
		_, err := config.Parse([]byte(minimal), []string{env})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", env, err, want)
		}
	}
}

// TestGoBuiltConfig: Default, SetDefaults and Validate for programs that
// build the Config in code; SetDefaults is idempotent.
func TestGoBuiltConfig(t *testing.T) {
	c := config.Default()
	c.App.URL = "http://127.0.0.1:8080/kafka"
	c.Topics = []config.Topic{{Name: "orders"}}
	c.SetDefaults()
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	wantDefaults(t, c)

	var empty config.Config
	empty.SetDefaults()
	if err := empty.Validate(); err == nil {
		t.Error("Validate accepted a zero Config")
	}
}

// TestExampleConfig loads the repository's config.yaml, which must be
// valid and must spell out the real defaults.
func TestExampleConfig(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, config.EnvPrefix) && name != config.EnvConfigFile {
			t.Setenv(name, "") // make sure the test sees the file alone
			os.Unsetenv(name)
		}
	}
	c, err := config.Load("../../config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	wantDefaults(t, c)
}

// TestSyntaxError: a YAML error is a *SyntaxError naming the line at
// fault, not the line where the enclosing block starts.
func TestSyntaxError(t *testing.T) {
	_, err := config.Parse([]byte("app:\n  url: http://x\ntopics:\n  - name: orders\n    retry:\n      tiers: [1m]\n     jitter: 0.1\n"), nil)
	var se *config.SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a *SyntaxError", err)
	}
	if se.Line != 7 || se.Text != "     jitter: 0.1" {
		t.Errorf("SyntaxError = %+v, want line 7", se)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load("testdata/no-such-config.yaml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error = %v, want one wrapping os.ErrNotExist", err)
	}
}

func TestInstanceID(t *testing.T) {
	for _, tc := range []struct{ host, want string }{
		{"pod-0", "pod-0"},
		{"my host.example.com", "my-host.example.com"},
		{"", "localhost"},
		{"a/b:c", "a-b-c"},
	} {
		if got := flow.SanitizeInstanceID(tc.host); got != tc.want {
			t.Errorf("flow.SanitizeInstanceID(%q) = %q, want %q", tc.host, got, tc.want)
		}
	}
	cfg, err := config.Parse([]byte("app: {url: http://127.0.0.1:8080/kafka}\ntopics: [{name: orders}]\n"), []string{"KRETRY_KAFKA__INSTANCE_ID=pod-7"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Kafka.InstanceIDOrHost(); got != "pod-7" {
		t.Errorf("with KRETRY_KAFKA__INSTANCE_ID=pod-7: %q", got)
	}
	host, _ := os.Hostname()
	cfg.Kafka.InstanceID = ""
	if got := cfg.Kafka.InstanceIDOrHost(); got != flow.SanitizeInstanceID(host) {
		t.Errorf("default %q, want the host name %q", got, host)
	}
}

// The test suites' variables (KRETRY_TEST_BROKER, …) are not config keys:
// a developer who sets one must not break kretry's config loading.
func TestTestVariablesAreNotConfigKeys(t *testing.T) {
	_, err := config.Parse([]byte("app: {url: http://127.0.0.1:8080/kafka}\ntopics: [{name: orders}]\n"),
		[]string{"KRETRY_TEST_BROKER=kafka", "KRETRY_TEST_LOG=info", "KRETRY_TEST_KAFKA_JARS=/tmp/x"})
	if err != nil {
		t.Fatalf("KRETRY_TEST_ variables broke the config: %v", err)
	}
}

// TestBareZeroDuration: 0 needs no unit. The docs write `max_age: 0`,
// `dlq.retention: 0` and `lag.interval: 0`, and the environment already
// took "0" (time.ParseDuration does); a bare non-zero number still needs
// one (testdata/bad/duration_without_unit).
func TestBareZeroDuration(t *testing.T) {
	c, err := config.Parse([]byte(`
app: {url: http://127.0.0.1:8080/kafka}
lag: {interval: 0}
topics:
  - name: orders
    max_age: 0
    dlq: {retention: 0}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Lag.Interval != 0 || c.Topics[0].MaxAge != 0 || c.Topics[0].DLQ.Retention != 0 {
		t.Errorf("lag.interval %v, max_age %v, dlq.retention %v: want 0 each", c.Lag.Interval, c.Topics[0].MaxAge, c.Topics[0].DLQ.Retention)
	}
}
