package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "dev"},
		{"module version", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: vcs("vcs.revision", "0123456789abcdef0123")}, "v1.4.0"},
		{"pseudo-version", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101000000-0123456789ab+dirty"}}, "v0.0.0-20260101000000-0123456789ab+dirty"},
		{"devel, revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("vcs.revision", "0123456789abcdef0123", "vcs.modified", "false")}, "0123456789ab"},
		{"devel, modified", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("vcs.revision", "0123456789abcdef0123", "vcs.modified", "true")}, "0123456789ab+dirty"},
		{"devel, no vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		if got := buildVersion(tc.bi); got != tc.want {
			t.Errorf("%s: buildVersion = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := `^kretry \S+ \(` + regexp.QuoteMeta(runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH) + `\)\n$`
	if !regexp.MustCompile(want).MatchString(out.String()) {
		t.Errorf("version prints %q, want %s", out.String(), want)
	}
}

// TestDockerfileStampsTheVersion: the image's build sets the version its
// VERSION argument names (Dockerfile's -ldflags -X), so the variable it
// names must exist: the linker ignores an -X whose symbol is gone.
func TestDockerfileStampsTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-X (\S+)=\$\{VERSION\}`).FindSubmatch(df)
	if m == nil {
		t.Fatal("the Dockerfile's go build sets no -X …=${VERSION}")
	}
	bin := filepath.Join(t.TempDir(), "kretry")
	build := exec.Command("go", "build", "-ldflags", "-X "+string(m[1])+"=v9.8.7-stamped", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "kretry v9.8.7-stamped ") {
		t.Errorf("kretry version printed %q after -X %s=v9.8.7-stamped: the Dockerfile names a variable the binary does not read", out, m[1])
	}
}
