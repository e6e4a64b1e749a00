package e2e

// Tests of the Helm chart in charts/kretry: helm lint, helm template with
// default and changed values, and the rendered config checked and booted by
// the kretry binary under test. They need the helm CLI and skip without it
// (.ci/run installs it).

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
