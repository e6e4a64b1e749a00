package e2e

// Tests of the chart's optional KEDA ScaledObject (keda.enabled): rendered
// with helm template, its fields and refusals checked, and its PromQL
// queries evaluated by promtool against series as several kretry instances
// export them. They need helm (and promtool for the queries) and skip
// without them.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type scaledObjectSpec struct {
	ScaleTargetRef struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Name       string `yaml:"name"`
	} `yaml:"scaleTargetRef"`
	MinReplicaCount *int `yaml:"minReplicaCount"`
	MaxReplicaCount *int `yaml:"maxReplicaCount"`
	PollingInterval int  `yaml:"pollingInterval"`
	CooldownPeriod  int  `yaml:"cooldownPeriod"`
	Triggers        []struct {
		Type     string            `yaml:"type"`
		Name     string            `yaml:"name"`
		Metadata map[string]string `yaml:"metadata"`
	} `yaml:"triggers"`
}

// renderValues runs helm template with a values file (lists, such as
// config.topics, are awkward with --set) and returns the documents by kind.
func renderValues(t *testing.T, helm, values string) (map[string]*k8sDoc, string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runHelm(t, helm, "template", "t", chartDir(t), "-f", f)
	if err != nil {
		return nil, errOut, err
	}
	docs := map[string]*k8sDoc{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var d k8sDoc
		if err := dec.Decode(&d); err != nil {
			break
		}
		if d.Kind != "" {
			docs[d.Kind] = &d
		}
	}
	return docs, errOut, nil
}

// TestHelmKEDA: off by default; on, a ScaledObject targets the Deployment
// with one prometheus trigger per topic (its group's lag on the source, or
// the time to drain), and the Deployment leaves its replicas to KEDA.
func TestHelmKEDA(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)

	off := renderChart(t, helm)
	if off.docs["ScaledObject"] != nil {
		t.Errorf("a ScaledObject rendered by default; kinds %v", off.kinds())
	}
	if !hasSpecKey(off.docs["Deployment"], "replicas") {
		t.Errorf("without KEDA the Deployment has no replicas")
	}

	const topics = `
config:
  topics:
    - name: orders
    - name: payments
      group: payments-sidecar
`
	for _, tc := range []struct {
		name, values string
		queries      []string
		threshold    string
	}{
		{
			name:   "lag",
			values: "keda: {enabled: true, partitions: 6, minReplicaCount: 2, maxReplicaCount: 6, threshold: 500}" + topics,
			queries: []string{
				`sum(max by (messaging_destination_partition_id) (kretry_consumer_lag{messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders"}))`,
				`sum(max by (messaging_destination_partition_id) (kretry_consumer_lag{messaging_consumer_group_name="payments-sidecar",messaging_destination_name="payments"}))`,
			},
			threshold: "500",
		},
		{
			name:   "time to drain",
			values: "keda: {enabled: true, partitions: 6, minReplicaCount: 2, maxReplicaCount: 6, metric: timeToDrain, threshold: 120}" + topics,
			queries: []string{
				`clamp_max(max(kretry_lag_time_to_drain_seconds{messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders"}), 86400)`,
				`clamp_max(max(kretry_lag_time_to_drain_seconds{messaging_consumer_group_name="payments-sidecar",messaging_destination_name="payments"}), 86400)`,
			},
			threshold: "120",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, errOut, err := renderValues(t, helm, tc.values)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			so := docs["ScaledObject"]
			if so == nil {
				t.Fatalf("no ScaledObject rendered with keda.enabled")
			}
			if so.APIVersion != "keda.sh/v1alpha1" {
				t.Errorf("ScaledObject apiVersion %q, want keda.sh/v1alpha1", so.APIVersion)
			}
			var spec scaledObjectSpec
			decodeSpec(t, so, &spec)
			dep := docs["Deployment"]
			if r := spec.ScaleTargetRef; r.Kind != "Deployment" || r.APIVersion != "apps/v1" || r.Name != dep.Metadata.Name {
				t.Errorf("scaleTargetRef %+v, want the Deployment %s", r, dep.Metadata.Name)
			}
			if hasSpecKey(dep, "replicas") {
				t.Errorf("with KEDA the Deployment still sets replicas: helm upgrades would fight the autoscaler")
			}
			if spec.MinReplicaCount == nil || *spec.MinReplicaCount != 2 || spec.MaxReplicaCount == nil || *spec.MaxReplicaCount != 6 {
				t.Errorf("min/max replicas %s/%s, want 2/6", showInt(spec.MinReplicaCount), showInt(spec.MaxReplicaCount))
			}
			if len(spec.Triggers) != len(tc.queries) {
				t.Fatalf("%d triggers, want %d (one per topic): %+v", len(spec.Triggers), len(tc.queries), spec.Triggers)
			}
			for i, tr := range spec.Triggers {
				if tr.Type != "prometheus" || tr.Metadata["query"] != tc.queries[i] || tr.Metadata["threshold"] != tc.threshold ||
					tr.Metadata["serverAddress"] == "" {
					t.Errorf("trigger %d: %+v, want type prometheus, query %s, threshold %s and a serverAddress", i, tr, tc.queries[i], tc.threshold)
				}
			}
		})
	}
}

func hasSpecKey(d *k8sDoc, key string) bool {
	var m map[string]any
	if err := d.Spec.Decode(&m); err != nil {
		return false
	}
	_, ok := m[key]
	return ok
}

// TestHelmKEDARefusals: a ScaledObject that could scale past the
// partitions, or that is missing what it needs, is refused at render time
// with the reason.
func TestHelmKEDARefusals(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	for _, c := range []struct{ values, want string }{
		{"keda: {enabled: true, partitions: 3, maxReplicaCount: 4}", "keda.maxReplicaCount 4 is above keda.partitions 3"},
		{"keda: {enabled: true, partitions: 3, maxReplicaCount: 3}\nconfig: {embedded: {partitions: 3}}", ""},
		{"keda: {enabled: true}", "keda.partitions is not set"},
		{"keda: {enabled: true, partitions: 0}", "keda.partitions 0: must be at least 1"},
		{"keda: {enabled: true, partitions: 3, minReplicaCount: 3, maxReplicaCount: 2}", "keda.minReplicaCount 3: must be between 0 and keda.maxReplicaCount (2)"},
		{"keda: {enabled: true, partitions: 3, metric: cpu}", `keda.metric "cpu": must be lag`},
		{"keda: {enabled: true, partitions: 3, serverAddress: \"\"}", "keda.serverAddress is empty"},
	} {
		_, errOut, err := renderValues(t, helm, c.values)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("values %q: refused (%v, %s), want it rendered", c.values, err, errOut)
		case c.want != "" && (err == nil || !strings.Contains(errOut, c.want)):
			t.Errorf("values %q: err %v, stderr %q; want a refusal containing %q", c.values, err, errOut, c.want)
		}
	}
}

// TestHelmKEDAQueries evaluates the rendered queries with promtool test
// rules against series as two kretry instances export them (every
// instance's lag monitor reports the same group), in both export modes:
// the lag query must count each partition once, and the time-to-drain one
// must clamp +Inf.
func TestHelmKEDAQueries(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed: apt-get install prometheus")
	}
	query := func(metric string) string {
		docs, errOut, err := renderValues(t, helm, fmt.Sprintf("keda: {enabled: true, partitions: 3, metric: %s}", metric))
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, errOut)
		}
		var spec scaledObjectSpec
		decodeSpec(t, docs["ScaledObject"], &spec)
		return spec.Triggers[0].Metadata["query"]
	}
	lagQ, ttdQ := query("lag"), query("timeToDrain")
	sel := `messaging_consumer_group_name="orders-kretry",messaging_destination_name="orders",kretry_source="orders",kretry_stage="source"`
	rules := fmt.Sprintf(`groups:
  - name: keda
    rules:
      - record: keda:lag
        expr: %q
      - record: keda:ttd
        expr: %q
`, lagQ, ttdQ)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("rules.yaml", rules)
	series := func(instance, partition string, lag, ttd string) string {
		p := ""
		if partition != "" {
			p = `,messaging_destination_partition_id="` + partition + `"`
		}
		return fmt.Sprintf(`      - series: 'kretry_consumer_lag{instance=%q,%s%s}'
        values: '%s'
      - series: 'kretry_lag_time_to_drain_seconds{instance=%q,%s%s}'
        values: '%s'
`, instance, sel, p, lag, instance, sel, p, ttd)
	}
	test := fmt.Sprintf(`rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  # per partition: partitions 0 and 1, each reported by pods a and b
  - interval: 1m
    input_series:
%s%s%s%s    promql_expr_test:
      - expr: keda:lag
        eval_time: 1m
        exp_samples: [{labels: 'keda:lag', value: 500}]
      - expr: keda:ttd
        eval_time: 1m
        exp_samples: [{labels: 'keda:ttd', value: 30}]
      - expr: keda:ttd
        eval_time: 2m
        exp_samples: [{labels: 'keda:ttd', value: 86400}]
  # per topic (metrics.per_partition: false): no partition label
  - interval: 1m
    input_series:
%s%s    promql_expr_test:
      - expr: keda:lag
        eval_time: 1m
        exp_samples: [{labels: 'keda:lag', value: 700}]
`,
		series("a:9464", "0", "300 300 300", "30 30 +Inf"), series("b:9464", "0", "300 300 300", "30 30 +Inf"),
		series("a:9464", "1", "200 200 200", "20 20 20"), series("b:9464", "1", "200 200 200", "20 20 20"),
		series("a:9464", "", "700 700", "10 10"), series("b:9464", "", "700 700", "10 10"))
	write("test.yaml", test)
	cmd := exec.Command(promtool, "test", "rules", "test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s\nrules:\n%s\ntest:\n%s", err, out, rules, test)
	}
}
