package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// TestSummarize feeds recorded `go test -json` runs (testdata/*.json, made
// with go1.26 from a throwaway module: passing, failing, skipping,
// panicking, timed-out, crashing in TestMain, not compiling) and compares
// the summary with testdata/*.golden.
func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failed bool
		want   []string // lines that must be there, beyond the golden
		absent []string
	}{
		{name: "pass", want: []string{
			"ok  \texample.com/fx/pass\t",
			"?   \texample.com/fx/notests\t[no test files]",
			"skipped 3 tests: kcat not installed: apt-get install kcat (example.com/fx/pass.TestSub/b, example.com/fx/skip.TestA, example.com/fx/skip.TestB)",
			"skipped 1 test: helm not installed: see .ci/run (example.com/fx/skip.TestC)",
			"skipped 1 test: (no reason given) (example.com/fx/skip.TestD)",
			"skipped 1 package: real-Kafka pass: real Kafka unavailable: [java mvn] not on PATH (example.com/fx/skip)",
			"tests: 4 passed, 0 failed, 5 skipped",
		}, absent: []string{"hidden unless it fails", "=== RUN", "PASS\n"}},
		{name: "fail", failed: true, want: []string{
			"f_test.go:7: context before the failure", "f_test.go:8: got 2, want 3", "--- FAIL: TestBad",
			"--- FAIL: TestParent/broken", "sub failed", "FAIL\texample.com/fx/fail\t", "ok  \texample.com/fx/pass\t",
			"tests: 6 passed, 3 failed, 5 skipped",
		}, absent: []string{"hidden unless it fails", "=== RUN   TestGood"}},
		{name: "panic", failed: true, want: []string{
			"--- FAIL: TestPanics", "panic: assignment to entry in nil map", "FAIL\texample.com/fx/panicky\t",
		}},
		{name: "build", failed: true, want: []string{
			"broken/b.go:3:23: cannot use", "FAIL\texample.com/fx/broken [build failed]",
			"tests: 3 passed, 1 failed, 1 skipped",
		}},
		{name: "crash", failed: true, want: []string{
			"panic: test timed out after 2s", "--- FAIL: TestHangs (did not finish)", "FAIL\texample.com/fx/hang\t",
			"panic: setup broke", "FAIL\texample.com/fx/mainpanic\t",
			"tests: 0 passed, 2 failed, 0 skipped",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", tc.name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			failed, err := summarize(bytes.NewReader(in), &out)
			if err != nil {
				t.Fatal(err)
			}
			if failed != tc.failed {
				t.Errorf("failed = %v, want %v", failed, tc.failed)
			}
			got := out.String()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("summary lacks %q", w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("summary has %q, which plain go test hides", a)
				}
			}
			golden := filepath.Join("testdata", tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("summary differs from %s (go test -run TestSummarize -update rewrites it):\n%s", golden, got)
			}
		})
	}
}

// TestSummarizeNoEvents: an empty input (go test died before printing)
// and a killed binary (start without end) are failures, not silence.
func TestSummarizeNoEvents(t *testing.T) {
	for name, in := range map[string]string{
		"empty":      "",
		"not json":   "go: cannot find main module\n",
		"no end":     `{"Action":"start","Package":"p"}` + "\n" + `{"Action":"run","Package":"p","Test":"TestX"}` + "\n",
		"build only": `{"ImportPath":"p [p.test]","Action":"build-fail"}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			failed, err := summarize(strings.NewReader(in), &out)
			if err != nil {
				t.Fatal(err)
			}
			if !failed {
				t.Errorf("failed = false for %q, want true; output:\n%s", in, out.String())
			}
		})
	}
}

// TestSummarizeFailureInOnePass: a package that runs its tests once per
// broker fails a test in the first pass and passes it in the second; the
// summary must still print the first pass's failure (it printed only
// "FAIL" for the package, with no test named).
func TestSummarizeFailureInOnePass(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"example.com/p"}`,
		`{"Action":"output","Package":"example.com/p","Output":"=== broker: embedded\n"}`,
		`{"Action":"run","Package":"example.com/p","Test":"TestRate"}`,
		`{"Action":"output","Package":"example.com/p","Test":"TestRate","Output":"    rate_test.go:83: rate 3.10 records/s, want 5 ±20%\n"}`,
		`{"Action":"output","Package":"example.com/p","Test":"TestRate","Output":"--- FAIL: TestRate (10.00s)\n"}`,
		`{"Action":"fail","Package":"example.com/p","Test":"TestRate"}`,
		`{"Action":"output","Package":"example.com/p","Output":"=== broker: kafka\n"}`,
		`{"Action":"run","Package":"example.com/p","Test":"TestRate"}`,
		`{"Action":"output","Package":"example.com/p","Test":"TestRate","Output":"--- PASS: TestRate (10.00s)\n"}`,
		`{"Action":"pass","Package":"example.com/p","Test":"TestRate"}`,
		`{"Action":"output","Package":"example.com/p","Output":"FAIL\texample.com/p\t20.0s\n"}`,
		`{"Action":"fail","Package":"example.com/p"}`,
	}, "\n")
	var out bytes.Buffer
	failed, err := summarize(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("failed = false, want true")
	}
	for _, w := range []string{"rate_test.go:83: rate 3.10 records/s", "--- FAIL: TestRate", "tests: 1 passed, 1 failed"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("summary lacks %q:\n%s", w, out.String())
		}
	}
}
