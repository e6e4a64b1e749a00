package e2e

// Tests of the Helm chart in charts/kretry: helm lint, helm template with
// default and changed values, and the rendered config checked and booted by
// the kretry binary under test. They need the helm CLI and skip without it
// (.ci/run installs it).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// chartConfigPath is where the chart mounts the config in the kretry
// container.
const chartConfigPath = "/etc/kretry/config.yaml"

// requireHelm returns the helm binary or skips the test.
func requireHelm(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("helm")
	if err != nil {
		t.Skip("helm is not on PATH: skipping the Helm chart tests " +
			"(install it with `GOBIN=/usr/local/bin go install helm.sh/helm/v3/cmd/helm@v3.22.0`, as .ci/run does)")
	}
	return p
}

// chartDir is charts/kretry, from the e2e package directory.
func chartDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "charts", "kretry"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
		t.Fatalf("the chart: %v", err)
	}
	return dir
}

// runHelm runs helm with its config, cache and data under a temporary
// directory (nothing of the developer's helm setup leaks in or out).
func runHelm(t *testing.T, helm string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("helm %s: no exit within 2m", strings.Join(args, " "))
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return o.String(), e.String(), err
}

// The parts of the rendered manifests the tests look at.

type objectMeta struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type k8sDoc struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   objectMeta        `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	Spec       yaml.Node         `yaml:"spec"`
}

type deploymentSpec struct {
	Replicas int `yaml:"replicas"`
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Template struct {
		Metadata objectMeta `yaml:"metadata"`
		Spec     podSpec    `yaml:"spec"`
	} `yaml:"template"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container `yaml:"containers"`
	Volumes                       []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name  string   `yaml:"name"`
	Image string   `yaml:"image"`
	Args  []string `yaml:"args"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Key      string `yaml:"key"`
				Optional *bool  `yaml:"optional"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"` // a port name or number
	} `yaml:"httpGet"`
}

// port returns the containerPort named name, or 0.
func (c *container) port(name string) int {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// probePort resolves a probe's port (a name or a number) in c.
func (c *container) probePort(t *testing.T, p *probe) int {
	t.Helper()
	if n, err := strconv.Atoi(p.HTTPGet.Port); err == nil {
		return n
	}
	n := c.port(p.HTTPGet.Port)
	if n == 0 {
		t.Fatalf("container %s: probe port %q names no port of the container", c.Name, p.HTTPGet.Port)
	}
	return n
}

type serviceSpec struct {
	Selector map[string]string `yaml:"selector"`
	Ports    []struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort string `yaml:"targetPort"`
	} `yaml:"ports"`
}

type serviceMonitorSpec struct {
	Selector struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	} `yaml:"selector"`
	Endpoints []struct {
		Port string `yaml:"port"`
		Path string `yaml:"path"`
	} `yaml:"endpoints"`
}

// release is one rendering of the chart.
type release struct {
	docs           map[string]*k8sDoc // by kind; the chart renders one of each
	deployment     deploymentSpec
	service        serviceSpec
	serviceMonitor *serviceMonitorSpec
	configYAML     string // the ConfigMap's config.yaml
}

func (r *release) kinds() []string {
	var ks []string
	for k := range r.docs {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// container returns the pod's container named name.
func (r *release) container(t *testing.T, name string) *container {
	t.Helper()
	for i := range r.deployment.Template.Spec.Containers {
		if c := &r.deployment.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q in the Deployment", name)
	return nil
}

// config returns the ConfigMap's config.yaml parsed.
func (r *release) config(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(r.configYAML), &m); err != nil {
		t.Fatalf("the ConfigMap's config.yaml: %v\n%s", err, r.configYAML)
	}
	return m
}

// configString returns the string at a path of the rendered config.
func (r *release) configString(t *testing.T, path ...string) string {
	t.Helper()
	var v any = r.config(t)
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("config %s: not a mapping at %q", strings.Join(path, "."), k)
		}
		v = m[k]
	}
	s, ok := v.(string)
	if !ok {
		t.Fatalf("config %s = %v (%T), want a string", strings.Join(path, "."), v, v)
	}
	return s
}

// writeConfig writes the ConfigMap's config.yaml to a temporary file.
func (r *release) writeConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(r.configYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// renderChart runs `helm template t charts/kretry` with --set values and
// parses what it prints.
func renderChart(t *testing.T, helm string, sets ...string) *release {
	t.Helper()
	args := []string{"template", "t", chartDir(t)}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, errOut, err := runHelm(t, helm, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	r := &release{docs: map[string]*k8sDoc{}}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var d k8sDoc
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("parsing the output of helm template: %v\n%s", err, out)
		}
		if d.Kind == "" {
			continue // an empty document
		}
		if r.docs[d.Kind] != nil {
			t.Fatalf("two %s documents rendered (%s, %s)", d.Kind, r.docs[d.Kind].Metadata.Name, d.Metadata.Name)
		}
		r.docs[d.Kind] = &d
	}
	for _, kind := range []string{"Deployment", "ConfigMap", "Service"} {
		if r.docs[kind] == nil {
			t.Fatalf("no %s rendered; kinds: %v\n%s", kind, r.kinds(), out)
		}
	}
	decodeSpec(t, r.docs["Deployment"], &r.deployment)
	decodeSpec(t, r.docs["Service"], &r.service)
	if d := r.docs["ServiceMonitor"]; d != nil {
		r.serviceMonitor = new(serviceMonitorSpec)
		decodeSpec(t, d, r.serviceMonitor)
	}
	cfg, ok := r.docs["ConfigMap"].Data["config.yaml"]
	if !ok {
		t.Fatalf("the ConfigMap has no config.yaml; data keys: %v", r.docs["ConfigMap"].Data)
	}
	r.configYAML = cfg
	return r
}

func decodeSpec(t *testing.T, d *k8sDoc, v any) {
	t.Helper()
	if err := d.Spec.Decode(v); err != nil {
		t.Fatalf("%s %s: spec: %v", d.Kind, d.Metadata.Name, err)
	}
}

// TestHelmLint: the chart passes helm lint --strict, with the
// ServiceMonitor off (default) and on.
func TestHelmLint(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	for _, sets := range [][]string{nil, {"serviceMonitor.enabled=true"}} {
		args := []string{"lint", "--strict", chartDir(t)}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		out, errOut, err := runHelm(t, helm, args...)
		if err != nil || !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
		}
	}
}

// TestHelmTemplate checks the default rendering: one Deployment whose pods
// run the app and kretry side by side, kretry started on the mounted
// config with its probes on the metrics port, a config kretry accepts,
// pointing at the app container, and the metrics Service.
func TestHelmTemplate(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	r := renderChart(t, helm)

	if got, want := r.kinds(), []string{"ConfigMap", "Deployment", "Service"}; !slices.Equal(got, want) {
		t.Errorf("rendered kinds %v, want %v (no ServiceMonitor by default)", got, want)
	}
	pod := r.deployment.Template.Spec
	if len(pod.Containers) != 2 {
		t.Fatalf("the pod has %d containers, want 2 (app and kretry)", len(pod.Containers))
	}
	kr := r.container(t, "kretry")
	app := r.container(t, "app")

	// kretry runs the mounted config.
	if want := []string{"run", "-c", chartConfigPath}; !slices.Equal(kr.Args, want) {
		t.Errorf("kretry args %q, want %q", kr.Args, want)
	}
	mounted := false
	for _, m := range kr.VolumeMounts {
		if m.MountPath != chartConfigPath {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == r.docs["ConfigMap"].Metadata.Name && m.SubPath == "config.yaml" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("%s is not mounted from key config.yaml of ConfigMap %s: mounts %+v, volumes %+v",
			chartConfigPath, r.docs["ConfigMap"].Metadata.Name, kr.VolumeMounts, pod.Volumes)
	}

	// The probes hit /healthz and /readyz on the port config.metrics.listen
	// serves, which must be reachable from outside the pod.
	metricsPort := kr.port("metrics")
	if metricsPort == 0 {
		t.Fatalf("kretry declares no port named metrics: %+v", kr.Ports)
	}
	for _, p := range []struct {
		name string
		pr   *probe
		path string
	}{{"liveness", kr.LivenessProbe, "/healthz"}, {"readiness", kr.ReadinessProbe, "/readyz"}} {
		if p.pr == nil || p.pr.HTTPGet == nil {
			t.Errorf("kretry has no HTTP %s probe", p.name)
			continue
		}
		if p.pr.HTTPGet.Path != p.path {
			t.Errorf("kretry %s probe path %q, want %q", p.name, p.pr.HTTPGet.Path, p.path)
		}
		if got := kr.probePort(t, p.pr); got != metricsPort {
			t.Errorf("kretry %s probe port %d, want the metrics port %d", p.name, got, metricsPort)
		}
	}
	listen := r.configString(t, "metrics", "listen")
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("config metrics.listen %q: %v", listen, err)
	}
	if port != strconv.Itoa(metricsPort) {
		t.Errorf("config metrics.listen %q, but the container port is %d", listen, metricsPort)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		t.Errorf("config metrics.listen %q is loopback: probes and Prometheus cannot reach it", listen)
	}

	// The config points at real brokers and at the app container.
	if brokers := r.config(t)["kafka"].(map[string]any)["brokers"]; fmt.Sprint(brokers) == "[embedded]" {
		t.Errorf("config kafka.brokers %v: the chart's default should be a (placeholder) cluster", brokers)
	}
	appURL, err := url.Parse(r.configString(t, "app", "url"))
	if err != nil {
		t.Fatal(err)
	}
	if appURL.Hostname() != "127.0.0.1" || appURL.Port() != strconv.Itoa(app.port("http")) || appURL.Path != "/kafka" {
		t.Errorf("config app.url %s, want http://127.0.0.1:%d/kafka (the app container's port)", appURL, app.port("http"))
	}

	// kretry accepts the rendered config.
	path := r.writeConfig(t)
	stdout, stderr, code := runKretry(t, time.Minute, nil, "validate", "-c", path)
	if code != 0 || !strings.Contains(stdout, "OK") {
		t.Errorf("kretry validate of the rendered config: exit %d\nstdout: %s\nstderr: %s\nconfig:\n%s", code, stdout, stderr, r.configYAML)
	}

	// SIGTERM waits up to app.timeout for deliveries in flight: the grace
	// period covers it with a margin.
	timeout, err := time.ParseDuration(r.configString(t, "app", "timeout"))
	if err != nil {
		t.Fatal(err)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < timeout+5*time.Second {
		t.Errorf("terminationGracePeriodSeconds %s, want at least app.timeout %v + 5s", showInt(g), timeout)
	}

	// Annotations: the config checksum and Prometheus scraping.
	ann := r.deployment.Template.Metadata.Annotations
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(ann["checksum/config"]) {
		t.Errorf("pod annotation checksum/config = %q, want a sha256", ann["checksum/config"])
	}
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(metricsPort) {
		t.Errorf("pod annotations %v: want prometheus.io/scrape \"true\" and prometheus.io/port %d", ann, metricsPort)
	}

	// kafka.instance_id is the pod name (static membership; distinct for
	// hostNetwork pods).
	instanceID := false
	for _, e := range kr.Env {
		if e.Name == "KRETRY_KAFKA__INSTANCE_ID" {
			instanceID = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		}
	}
	if !instanceID {
		t.Errorf("the kretry container's env does not set KRETRY_KAFKA__INSTANCE_ID from metadata.name: %+v", kr.Env)
	}

	// No SASL password variable unless a Secret is named.
	for _, e := range kr.Env {
		if e.Name == "KRETRY_KAFKA__SASL__PASSWORD" {
			t.Errorf("KRETRY_KAFKA__SASL__PASSWORD set by default: %+v", e)
		}
	}

	// The Service reaches the pods' metrics port.
	podLabels := r.deployment.Template.Metadata.Labels
	if len(r.service.Selector) == 0 || !subset(r.service.Selector, podLabels) || !subset(r.deployment.Selector.MatchLabels, podLabels) {
		t.Errorf("Service selector %v / Deployment selector %v do not select the pod labels %v",
			r.service.Selector, r.deployment.Selector.MatchLabels, podLabels)
	}
	if len(r.service.Ports) != 1 || r.service.Ports[0].Name != "metrics" || r.service.Ports[0].TargetPort != "metrics" {
		t.Errorf("Service ports %+v, want one named metrics targeting the container port metrics", r.service.Ports)
	}
}

// showInt prints an optional field.
func showInt(p *int) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(*p)
}

// subset reports whether every label of sel is in labels.
func subset(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestHelmServiceMonitor: serviceMonitor.enabled=true adds a ServiceMonitor
// scraping the Service's metrics port.
func TestHelmServiceMonitor(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	r := renderChart(t, helm, "serviceMonitor.enabled=true")
	sm := r.serviceMonitor
	if sm == nil {
		t.Fatalf("no ServiceMonitor rendered with serviceMonitor.enabled=true; kinds %v", r.kinds())
	}
	if v := r.docs["ServiceMonitor"].APIVersion; v != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %q", v)
	}
	if len(sm.Selector.MatchLabels) == 0 || !subset(sm.Selector.MatchLabels, r.docs["Service"].Metadata.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select the Service (labels %v)", sm.Selector.MatchLabels, r.docs["Service"].Metadata.Labels)
	}
	if len(sm.Endpoints) != 1 || sm.Endpoints[0].Port != "metrics" || sm.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want port metrics, path /metrics", sm.Endpoints)
	}
	// The rest is the default rendering.
	if len(r.deployment.Template.Spec.Containers) != 2 {
		t.Errorf("the pod has %d containers, want 2", len(r.deployment.Template.Spec.Containers))
	}
}

// TestHelmConfigChecksum: a config change changes the pod annotation
// checksum/config (the pods roll); a change elsewhere does not.
func TestHelmConfigChecksum(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	sum := func(r *release) string { return r.deployment.Template.Metadata.Annotations["checksum/config"] }
	base := renderChart(t, helm)
	if sum(base) == "" {
		t.Fatal("no checksum/config pod annotation")
	}
	if again := renderChart(t, helm); sum(again) != sum(base) {
		t.Errorf("checksum/config differs between two renderings of the same values: %s, %s", sum(base), sum(again))
	}

	longer := renderChart(t, helm, "config.app.timeout=40s")
	if got := longer.configString(t, "app", "timeout"); got != "40s" {
		t.Fatalf("--set config.app.timeout=40s: the ConfigMap has app.timeout %q", got)
	}
	if sum(longer) == sum(base) {
		t.Errorf("config.app.timeout 10s → 40s left checksum/config unchanged (%s): the pods would not roll", sum(base))
	}
	if g := longer.deployment.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < 45 {
		t.Errorf("app.timeout 40s: terminationGracePeriodSeconds %s, want at least 45", showInt(g))
	}

	tiers := renderChart(t, helm, "config.topics[0].retry.tiers={30s,5m}")
	if sum(tiers) == sum(base) {
		t.Errorf("changing topics[0].retry.tiers left checksum/config unchanged")
	}

	scaled := renderChart(t, helm, "replicaCount=3")
	if scaled.deployment.Replicas != 3 {
		t.Errorf("--set replicaCount=3: replicas %d", scaled.deployment.Replicas)
	}
	if sum(scaled) != sum(base) {
		t.Errorf("replicaCount changed checksum/config (%s → %s): the config did not change", sum(base), sum(scaled))
	}
}

// TestHelmSASLPassword: naming a Secret passes it as
// KRETRY_KAFKA__SASL__PASSWORD, which completes a config with a SASL
// mechanism; a mechanism without any password is refused at render time.
func TestHelmSASLPassword(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	r := renderChart(t, helm,
		"config.kafka.sasl.mechanism=scram-sha-512",
		"config.kafka.sasl.username=kretry",
		"kretry.saslPassword.existingSecret=kafka-creds")
	kr := r.container(t, "kretry")
	found := false
	for _, e := range kr.Env {
		if e.Name != "KRETRY_KAFKA__SASL__PASSWORD" {
			continue
		}
		found = true
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "kafka-creds" || e.ValueFrom.SecretKeyRef.Key != "password" {
			t.Errorf("KRETRY_KAFKA__SASL__PASSWORD = %+v, want valueFrom.secretKeyRef {kafka-creds, password}", e)
		}
	}
	if !found {
		t.Fatalf("no KRETRY_KAFKA__SASL__PASSWORD in the kretry container's env: %+v", kr.Env)
	}
	path := r.writeConfig(t)
	if out, errOut, code := runKretry(t, time.Minute, []string{"KRETRY_KAFKA__SASL__PASSWORD=s3cret"}, "validate", "-c", path); code != 0 {
		t.Errorf("validate with the password from the environment: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := runKretry(t, time.Minute, nil, "validate", "-c", path); code == 0 || !strings.Contains(errOut, "kafka.sasl.password") {
		t.Errorf("validate without the password: exit %d, stderr %q; want a refusal naming kafka.sasl.password", code, errOut)
	}

	_, errOut, err := runHelm(t, helm, "template", "t", chartDir(t), "--set", "config.kafka.sasl.mechanism=plain", "--set", "config.kafka.sasl.username=kretry")
	if err == nil || !strings.Contains(errOut, "kretry.saslPassword.existingSecret") {
		t.Errorf("a SASL mechanism without a password rendered (err %v, stderr %q); want a refusal naming kretry.saslPassword.existingSecret", err, errOut)
	}
}

// TestHelmRefusals: values that would give pods failing their probes or
// cut shutdown short are refused at render time, with the reason.
func TestHelmRefusals(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	for _, c := range []struct{ set, want string }{
		{"config.metrics.listen=127.0.0.1:9464", "loopback"},
		{"config.metrics.listen=", "config.metrics.listen is empty"},
		{"terminationGracePeriodSeconds=10", "must be at least config.app.timeout"},
	} {
		_, errOut, err := runHelm(t, helm, "template", "t", chartDir(t), "--set", c.set)
		if err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("--set %s: err %v, stderr %q; want a refusal containing %q", c.set, err, errOut, c.want)
		}
	}
}

// TestHelmConfigBoots runs `kretry run` on the rendered config (pointed at
// an embedded broker instead of the placeholder cluster), checks the
// probes' paths answer 200 on the port the Deployment declares, and that
// SIGTERM ends it cleanly well within terminationGracePeriodSeconds.
func TestHelmConfigBoots(t *testing.T) {
	brokerIndependent(t)
	t.Parallel()
	helm := requireHelm(t)
	_, port, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	r := renderChart(t, helm,
		"config.kafka.brokers={embedded}",
		"config.embedded.listen="+freeAddr(t),
		"config.metrics.listen=0.0.0.0:"+port)
	kr := r.container(t, "kretry")
	if got := kr.port("metrics"); strconv.Itoa(got) != port {
		t.Fatalf("metrics container port %d, want %s from config.metrics.listen", got, port)
	}

	// The container's args, with the config at a local path.
	args := slices.Clone(kr.Args)
	for i, a := range args {
		if a == chartConfigPath {
			args[i] = r.writeConfig(t)
		}
	}
	p := startKretry(t, "chart config", args...)
	for _, pr := range []*probe{kr.LivenessProbe, kr.ReadinessProbe} {
		u := fmt.Sprintf("http://127.0.0.1:%d%s", kr.probePort(t, pr), pr.HTTPGet.Path)
		waitFor(t, 30*time.Second, "200 from "+u, func() bool {
			resp, err := http.Get(u)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, func() { p.mustRun(t) })
	}
	g := r.deployment.Template.Spec.TerminationGracePeriodSeconds
	if g == nil {
		t.Fatal("no terminationGracePeriodSeconds in the Deployment")
	}
	grace := time.Duration(*g) * time.Second
	if code := p.stop(t, grace); code != 0 {
		t.Errorf("kretry run on the chart's config: exit %d after SIGTERM, want 0", code)
	}
}
