package main

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/kretry/kretry/internal/demo"
)

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestREADMEFlags: README's table of commands names every flag each
// command's help lists.
func TestREADMEFlags(t *testing.T) {
	_, table, ok := strings.Cut(readme(t), "### Commands and flags")
	if !ok {
		t.Fatal(`README has no "### Commands and flags" section`)
	}
	table, _, _ = strings.Cut(table, "\n#")
	for _, sc := range subcommands {
		name := strings.Join(sc.args, " ")
		var out, errb bytes.Buffer
		if code := run(context.Background(), append(append([]string{}, sc.args...), "-h"), &out, &errb); code != exitOK {
			t.Fatalf("%s -h: exit %d", name, code)
		}
		if name != "parking" && name != "dlq" && !strings.Contains(table, "| `kretry "+name+"` |") {
			t.Errorf("README's table has no row for kretry %s", name)
			continue
		}
		for _, f := range helpFlags(out.String()) {
			want := "`--" + f
			if f == "config" {
				want = "`-c FILE`"
			}
			if !strings.Contains(table, want) {
				t.Errorf("README does not document %s of kretry %s", want, name)
			}
		}
	}
}

// TestREADMEDemoFields: README lists every field of the demo's JSON
// report.
func TestREADMEDemoFields(t *testing.T) {
	text := readme(t)
	rt := reflect.TypeOf(demo.Report{})
	for i := range rt.NumField() {
		tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if tag != "" && tag != "-" && !strings.Contains(text, "`"+tag+"`") {
			t.Errorf("README does not list the demo report field %q", tag)
		}
	}
}

// TestREADMEGoVersion: README names the Go version go.mod requires.
func TestREADMEGoVersion(t *testing.T) {
	b, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	if !strings.Contains(readme(t), "Go "+m[1]+" ") {
		t.Errorf("README does not say Go %s (go.mod's go directive)", m[1])
	}
}
