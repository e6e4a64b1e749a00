package e2e

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
