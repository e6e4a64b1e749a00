package e2e

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

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
