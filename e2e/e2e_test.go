package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

// TestKcatInterop drives kretry with a real librdkafka client: kcat
// produces to `kretry broker` (duplicate headers, a tombstone), `kretry run`
// delivers to the test app, and kcat reads the DLQ back read_committed.
func TestKcatInterop(t *testing.T) {
	kcat := requireKcat(t)
	t.Parallel()

	broker, addr := startBroker(t)
	app := startApp(t, func(m *delivery.Message) answer {
		switch {
		case m.Value == nil:
			return answer{http.StatusUnprocessableEntity, "bad order: no value"}
		case bytes.Contains(m.Value, []byte("poison")):
			return answer{http.StatusUnprocessableEntity, "bad order"}
		}
		return answer{http.StatusOK, ""}
	})

	// kcat creates orders (the broker auto-creates topics on produce).
	// -K splits key|value per line; with -Z an empty value is a NULL
	// value (a tombstone). kcat skips empty lines, so -k cannot send one.
	runKcat(t, kcat, "order-1|good-1\norder-1|poison-1\norder-2|good-2\norder-3|\n",
		"-P", "-b", addr, "-t", "orders", "-K", "|", "-Z", "-H", "trace=abc", "-H", "trace=def")

	cfg := writeConfig(t, runConfig{Broker: addr, AppURL: app.url(), Tiers: []string{"100ms", "300ms"}})
	run := startKretry(t, "run", "run", "-c", cfg)

	byValue := func() map[string]delivered {
		m := map[string]delivered{}
		for _, d := range app.deliveries() {
			v := "<null>"
			if d.msg.Value != nil {
				v = string(d.msg.Value)
			}
			m[v] = d
		}
		return m
	}
	waitFor(t, 30*time.Second, "the app to receive all four records", func() bool {
		return len(byValue()) == 4
	}, func() { run.mustRun(t) })

	dlq := retrytopics.DLQTopic("orders")
	var recs []kcatRecord
	waitFor(t, 30*time.Second, "two records in "+dlq, func() bool {
		recs = parseKcatJSON(t, runKcat(t, kcat, "", "-C", "-b", addr, "-t", dlq, "-o", "beginning", "-e", "-q",
			"-X", "isolation.level=read_committed", "-J"))
		return len(recs) >= 2
	}, func() { run.mustRun(t) })
	if len(recs) != 2 {
		t.Fatalf("%s holds %d records, want 2 (poison-1 and the tombstone): %+v", dlq, len(recs), recs)
	}

	// What the app saw: each record once (no retries for 422 or 200), the
	// duplicate trace headers in order, the tombstone as a null value.
	got := byValue()
	if bad := app.malformed(); len(bad) > 0 {
		t.Errorf("requests breaking the wire contract: %q", bad)
	}
	if n := len(app.deliveries()); n != 4 {
		t.Errorf("app received %d deliveries, want 4 (one per record)", n)
	}
	wantHeaders := []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "trace", Value: []byte("def")}}
	for v, wantKey := range map[string]string{"good-1": "order-1", "poison-1": "order-1", "good-2": "order-2", "<null>": "order-3"} {
		d, ok := got[v]
		if !ok {
			t.Errorf("app never received %s", v)
			continue
		}
		if string(d.msg.Key) != wantKey {
			t.Errorf("%s: key %q, want %q", v, d.msg.Key, wantKey)
		}
		if d.msg.Attempt != 1 {
			t.Errorf("%s: ce-attempt %d, want 1", v, d.msg.Attempt)
		}
		if d.msg.Topic != "orders" || d.msg.ID != id("orders", d.msg.Partition, d.msg.Offset) {
			t.Errorf("%s: ce-id %q, topic %q partition %d offset %d: want orders/<partition>/<offset>", v, d.msg.ID, d.msg.Topic, d.msg.Partition, d.msg.Offset)
		}
		if !slices.EqualFunc(d.msg.Headers, wantHeaders, headerEqual) {
			t.Errorf("%s: app got Kafka headers %s, want %s", v, fmtHeaders(d.msg.Headers), fmtHeaders(wantHeaders))
		}
	}

	// What the DLQ holds: key, value (NULL kept NULL), the kretry header
	// run in its documented order, then the original headers unchanged.
	sizes := map[string]string{} // key → %S
	for line := range strings.Lines(runKcat(t, kcat, "", "-C", "-b", addr, "-t", dlq, "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k|%S|%p|%o\n")) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "|")
		if len(f) != 4 {
			t.Fatalf("kcat -f line %q: want key|size|partition|offset", line)
		}
		sizes[f[0]] = f[1]
	}
	if want := map[string]string{"order-1": "8", "order-3": "-1"}; !maps.Equal(sizes, want) {
		t.Errorf("%s key → value size (kcat %%k → %%S) = %v, want %v (poison-1, and -1 for the NULL value)", dlq, sizes, want)
	}
	for _, r := range recs {
		key := deref(r.Key)
		src, ok := map[string]string{"order-1": "poison-1", "order-3": "<null>"}[key]
		if !ok {
			t.Errorf("%s: unexpected record with key %q", dlq, key)
			continue
		}
		switch {
		case src == "<null>" && r.Payload != nil:
			t.Errorf("%s: tombstone of %s has value %q, want NULL", dlq, key, *r.Payload)
		case src != "<null>" && deref(r.Payload) != src:
			t.Errorf("%s: record of %s has value %q, want %q", dlq, key, deref(r.Payload), src)
		}
		names, values := splitKcatHeaders(r.Headers)
		wantNames := slices.Concat(retrytopics.Headers[:], []string{"trace", "trace"})
		if !slices.Equal(names, wantNames) {
			t.Errorf("%s: record of %s has headers %q, want %q", dlq, key, names, wantNames)
			continue
		}
		h := map[string]string{}
		for i, n := range names[:len(retrytopics.Headers)] {
			h[n] = values[i]
		}
		if tail := values[len(retrytopics.Headers):]; !slices.Equal(tail, []string{"abc", "def"}) {
			t.Errorf("%s: record of %s: original headers trace=%q, want abc then def", dlq, key, tail)
		}
		orig := got[src].msg
		for name, want := range map[string]string{
			retrytopics.HeaderAttempt:           "1",
			retrytopics.HeaderStage:             dlq,
			retrytopics.HeaderDueTime:           "",
			retrytopics.HeaderOriginalTopic:     "orders",
			retrytopics.HeaderOriginalPartition: strconv.Itoa(int(orig.Partition)),
			retrytopics.HeaderOriginalOffset:    strconv.FormatInt(orig.Offset, 10),
			retrytopics.HeaderErrorClass:        "permanent",
			retrytopics.HeaderErrorStatus:       "422",
			retrytopics.HeaderGroup:             "orders-kretry",
		} {
			if h[name] != want {
				t.Errorf("%s: record of %s: %s = %q, want %q", dlq, key, name, h[name], want)
			}
		}
		if !strings.Contains(h[retrytopics.HeaderErrorMessage], "bad order") {
			t.Errorf("%s: record of %s: %s = %q, want it to contain the app's answer %q", dlq, key, retrytopics.HeaderErrorMessage, h[retrytopics.HeaderErrorMessage], "bad order")
		}
		for _, name := range []string{retrytopics.HeaderOriginalTimestamp, retrytopics.HeaderFirstFailureTime, retrytopics.HeaderLastFailureTime} {
			if _, err := time.Parse(retrytopics.TimeFormat, h[name]); err != nil || !strings.HasSuffix(h[name], "Z") {
				t.Errorf("%s: record of %s: %s = %q, want RFC 3339 UTC with milliseconds", dlq, key, name, h[name])
			}
		}
	}

	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}
	if broker == nil {
		return // a Kafka node of the test, stopped by its cleanup
	}
	if code := broker.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry broker exited %d after SIGTERM, want 0", code)
	}
}

// TestValidateCommand pins the exit statuses and messages of `kretry
// validate` and of bad invocations.
func TestValidateCommand(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const head = "kafka:\n  brokers: [127.0.0.1:9092]\napp:\n  url: http://127.0.0.1:8080/kafka\n"
	good := write("good.yaml", head+"topics:\n  - name: orders\n    retry:\n      tiers: [100ms, 300ms]\n")
	bad := write("bad.yaml", head+"topics:\n  - name: orders\n    retry:\n      tiers: [10m, 1m]\n      jitter: 2\n")
	typo := write("typo.yaml", head+"  urll: http://x\ntopics:\n  - name: orders\n")

	for _, tc := range []struct {
		name       string
		args       []string
		env        []string
		code       int
		stdout     []string
		stderr     []string
		stdoutNone bool
	}{
		{name: "good", args: []string{"validate", "-c", good}, code: 0, stdout: []string{"OK", "orders"}},
		{name: "good via KRETRY_CONFIG", args: []string{"validate"}, env: []string{"KRETRY_CONFIG=" + good}, code: 0, stdout: []string{"OK"}},
		{
			name: "tiers not increasing, jitter out of range", args: []string{"validate", "-c", bad}, code: 2, stdoutNone: true,
			stderr: []string{`topics[0].retry.tiers[1]`, `"1m"`, `"10m"`, `topics[0].retry.jitter`, `"2"`},
		},
		{
			name: "env override is validated", args: []string{"validate", "-c", good}, env: []string{"KRETRY_TOPICS__0__RETRY__JITTER=2"},
			code: 2, stdoutNone: true, stderr: []string{`topics[0].retry.jitter`, `"2"`},
		},
		{name: "unknown key", args: []string{"validate", "-c", typo}, code: 2, stdoutNone: true, stderr: []string{"app.urll", "unknown key"}},
		{name: "missing -c", args: []string{"validate"}, code: 2, stdoutNone: true, stderr: []string{"no config file", "-c"}},
		{name: "file not found", args: []string{"validate", "-c", filepath.Join(dir, "nope.yaml")}, code: 2, stdoutNone: true, stderr: []string{"nope.yaml"}},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stdoutNone: true, stderr: []string{`unknown command "frobnicate"`, "Usage:"}},
		{name: "no command", args: nil, code: 2, stdoutNone: true, stderr: []string{"Usage:"}},
		{name: "run with bad config", args: []string{"run", "-c", bad}, code: 2, stdoutNone: true, stderr: []string{`topics[0].retry.tiers[1]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := runKretry(t, 15*time.Second, tc.env, tc.args...)
			if code != tc.code {
				t.Errorf("exit status %d, want %d", code, tc.code)
			}
			for _, s := range tc.stdout {
				if !strings.Contains(stdout, s) {
					t.Errorf("stdout does not contain %q", s)
				}
			}
			for _, s := range tc.stderr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr does not contain %q", s)
				}
			}
			if tc.stdoutNone && stdout != "" {
				t.Errorf("stdout is not empty")
			}
			if t.Failed() {
				t.Logf("kretry %s\nstdout:\n%s\nstderr:\n%s", strings.Join(tc.args, " "), stdout, stderr)
			}
		})
	}
}

// TestDemoCommand runs `kretry demo` and checks its JSON report.
func TestDemoCommand(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	stdout, stderr, code := runKretry(t, 90*time.Second, nil, "demo", "--records", "300", "--json", "--quiet")
	defer func() {
		if t.Failed() {
			t.Logf("kretry demo\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
		}
	}()
	if code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("stdout is not a JSON object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Errorf("stdout holds more than one JSON object")
	}
	for _, f := range []string{"produced", "delivered", "retried", "dead_lettered", "lost", "duration_ms", "ok"} {
		if _, ok := raw[f]; !ok {
			t.Errorf("report has no field %q", f)
		}
	}
	var r struct {
		Produced      int              `json:"produced"`
		Delivered     int              `json:"delivered"`
		Retried       map[string]int64 `json:"retried"`
		DeadLettered  int              `json:"dead_lettered"`
		Lost          int              `json:"lost"`
		DLQDuplicates int              `json:"dlq_duplicates"`
		DurationMS    int64            `json:"duration_ms"`
		OK            bool             `json:"ok"`
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("report: %v", err)
	}
	if r.Produced != 300 || r.Lost != 0 || r.Delivered+r.DeadLettered != 300 || !r.OK || r.DLQDuplicates != 0 {
		t.Errorf("report %+v: want produced 300, lost 0, delivered+dead_lettered 300, no DLQ duplicates, ok", r)
	}
	if r.DurationMS <= 0 {
		t.Errorf("duration_ms %d, want > 0", r.DurationMS)
	}
}

// TestRunAppDownThenUp starts kretry while the app is down (connection
// refused), brings the app up once the first failures have moved to the
// first tier, and checks that every record is then delivered from the
// tiers and none is dead-lettered.
func TestRunAppDownThenUp(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)
	var rs []*kgo.Record
	for i := range 20 {
		rs = append(rs, &kgo.Record{Topic: "orders", Key: fmt.Appendf(nil, "k-%d", i%5), Value: fmt.Appendf(nil, "order-%d", i)})
	}
	ids := produceSync(t, newClient(t, addr), rs...)

	appAddr := freeAddr(t) // nothing listens here yet
	cfg := writeConfig(t, runConfig{Broker: addr, AppURL: "http://" + appAddr + "/kafka", Tiers: []string{"100ms", "300ms", "1s"}})
	run := startKretry(t, "run", "run", "-c", cfg)

	adm := newAdmin(t, addr)
	tier1 := retrytopics.TierTopic("orders", 100*time.Millisecond)
	waitFor(t, 30*time.Second, "failed deliveries moved to "+tier1, func() bool {
		return endOffset(t, adm, tier1) > 0
	}, func() { run.mustRun(t) })
	app := startAppOn(t, appAddr, func(*delivery.Message) answer { return answer{http.StatusOK, ""} })

	waitFor(t, 30*time.Second, "the app to acknowledge all 20 records", func() bool {
		return app.ackedAll(ids)
	}, func() { run.mustRun(t) })
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}

	// The first failures were connection errors: transient, no HTTP
	// status, the cause in the message.
	moved := readTopic(t, addr, tier1, nil).sync(t)
	if len(moved) == 0 {
		t.Errorf("%s holds no record after the app came up", tier1)
	}
	for _, r := range moved {
		cls, _ := header(r, retrytopics.HeaderErrorClass)
		status, _ := header(r, retrytopics.HeaderErrorStatus)
		msg, _ := header(r, retrytopics.HeaderErrorMessage)
		if cls != "transient" || status != "" || !strings.Contains(msg, "refused") {
			t.Errorf("%s/%d/%d: %s=%q %s=%q %s=%q, want transient, no status, a message naming the refused connection", tier1, r.Partition, r.Offset,
				retrytopics.HeaderErrorClass, cls, retrytopics.HeaderErrorStatus, status, retrytopics.HeaderErrorMessage, msg)
			break
		}
	}

	retried := 0
	for _, d := range app.deliveries() {
		if d.msg.Attempt > 1 {
			retried++
		}
	}
	if retried == 0 {
		t.Errorf("no delivery had ce-attempt > 1, want the records to come back from the tiers")
	}
	if dl := readTopic(t, addr, retrytopics.DLQTopic("orders"), nil).sync(t); len(dl) != 0 {
		var got []string
		for _, r := range dl {
			o, _ := retrytopics.ReadOrigin(r, false, 0)
			cls, _ := header(r, retrytopics.HeaderErrorClass)
			got = append(got, o.ID()+" "+cls)
		}
		t.Errorf("the DLQ holds %d records, want none: %q", len(dl), got)
	}
	if bad := app.malformed(); len(bad) > 0 {
		t.Errorf("requests breaking the wire contract: %q", bad)
	}
}

func headerEqual(a, b kgo.RecordHeader) bool {
	return a.Key == b.Key && bytes.Equal(a.Value, b.Value) && (a.Value == nil) == (b.Value == nil)
}

func fmtHeaders(hs []kgo.RecordHeader) string {
	var b strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "%s=%q", h.Key, h.Value)
	}
	return "[" + b.String() + "]"
}

// splitKcatHeaders splits kcat's JSON header list (name, value, …) into
// names and values; a NULL value reads as "<null>".
func splitKcatHeaders(hs []*string) (names, values []string) {
	for i := 0; i+1 < len(hs); i += 2 {
		names = append(names, deref(hs[i]))
		v := "<null>"
		if hs[i+1] != nil {
			v = *hs[i+1]
		}
		values = append(values, v)
	}
	return names, values
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
