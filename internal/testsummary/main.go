// Command testsummary reads `go test -json` on stdin and prints what a
// plain `go test` prints — each package's closing line (`ok`, `FAIL`, `?`),
// the output of failed tests and of failed packages, build errors — then
// one line per distinct reason tests were skipped, with counts, and a
// closing count of tests passed, failed and skipped (a test still running
// when its binary died counts as failed, and so does a package that failed
// outside any test: a build failure, a crash in TestMain). Without -v a plain
// `go test ./...` hides skips; this makes them visible at the end of `make
// test` without changing what runs.
//
//	go test -json ./... 2>&1 | go run ./internal/testsummary
//
// It exits 1 when any test or package failed, a package's build failed, a
// package started but never ended (the test binary was killed) or the input
// held no test event at all; 0 otherwise. Lines that are not JSON events
// (go test's own errors, when stderr is merged) are printed as they come.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

func main() {
	failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json), with the build
// events of Go 1.24+ (ImportPath, build-output, build-fail, FailedBuild).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string
	FailedBuild string
}

// test is one test's buffered output and end.
type test struct {
	name   string
	output []string
	action string // pass, fail, skip; "" while running
	// failed: a run of it failed. A package that runs its tests once per
	// broker (kafkatest.RunMain) runs each name twice; a pass in the
	// second run must not hide the first run's failure.
	failed bool
}

// pkg is one package's buffered state until its end event.
type pkg struct {
	name   string
	output []string // lines outside any test
	tests  map[string]*test
	order  []string
	ended  bool
}

func (p *pkg) test(name string) *test {
	t := p.tests[name]
	if t == nil {
		t = &test{name: name}
		p.tests[name] = t
		p.order = append(p.order, name)
	}
	return t
}

// skipReason groups the skips of one reason.
type skipReason struct {
	reason   string
	packages bool // a package-level SKIP line (a whole pass of TestMain)
	count    int
	examples []string
}

type summary struct {
	out      io.Writer
	pkgs     map[string]*pkg
	order    []string
	reasons  map[string]*skipReason
	rorder   []string
	passed   int
	failedN  int
	skipped  int
	failed   bool
	anyEvent bool
}

// summarize reads events from in, writes the summary to out and reports
// whether anything failed.
func summarize(in io.Reader, out io.Writer) (bool, error) {
	s := &summary{out: out, pkgs: map[string]*pkg{}, reasons: map[string]*skipReason{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Text()
		var e event
		if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &e) != nil || e.Action == "" {
			fmt.Fprintln(out, line)
			continue
		}
		s.anyEvent = true
		s.handle(e)
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	for _, name := range s.order {
		if p := s.pkgs[name]; !p.ended {
			// The test binary never reported its end: killed, or go
			// test was interrupted.
			s.flush(p, "fail")
			fmt.Fprintf(out, "FAIL\t%s [no end reported: the test binary was killed or the run interrupted]\n", name)
		}
	}
	if !s.anyEvent {
		fmt.Fprintln(out, "testsummary: no go test -json event on the input")
		s.failed = true
	}
	s.printSkips()
	fmt.Fprintf(out, "tests: %d passed, %d failed, %d skipped\n", s.passed, s.failedN, s.skipped)
	return s.failed || s.failedN > 0, nil
}

func (s *summary) pkg(name string) *pkg {
	p := s.pkgs[name]
	if p == nil {
		p = &pkg{name: name, tests: map[string]*test{}}
		s.pkgs[name] = p
		s.order = append(s.order, name)
	}
	return p
}

func (s *summary) handle(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.out, e.Output) // compiler errors, as go test prints them
		return
	case "build-fail":
		s.failed = true // counted at its package's fail event (FailedBuild)
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.output = append(p.output, e.Output)
		case "pass", "fail", "skip":
			p.ended = true
			s.flush(p, e.Action)
		}
		return
	}
	t := p.test(e.Test)
	switch e.Action {
	case "output":
		t.output = append(t.output, e.Output)
	case "pass":
		t.action = e.Action
		s.passed++
	case "fail":
		t.action, t.failed = e.Action, true
		s.failedN++
	case "skip":
		t.action = e.Action
		s.skipped++
		s.addSkip(testReason(t.output), false, shortPkg(p.name)+"."+t.name)
	}
}

// flush prints a package at its end, as plain go test does: the closing
// line of a package that passed; everything of one that failed except the
// output of its tests that passed or skipped.
func (s *summary) flush(p *pkg, action string) {
	for _, line := range p.output {
		if r, ok := strings.CutPrefix(line, "SKIP "); ok {
			s.addSkip(strings.TrimSpace(r), true, shortPkg(p.name))
		}
	}
	if action != "fail" {
		for _, line := range p.output {
			if strings.HasPrefix(line, "ok ") || strings.HasPrefix(line, "?") || strings.HasPrefix(line, "FAIL") {
				fmt.Fprint(s.out, line)
			}
		}
		return
	}
	s.failed = true
	failedTests := 0
	for _, name := range p.order {
		t := p.tests[name]
		if !t.failed && (t.action == "pass" || t.action == "skip") {
			continue
		}
		failedTests++
		// Failed, or still running when the binary died (a timeout's
		// panic is written under the running test, which never ends).
		for _, line := range t.output {
			fmt.Fprint(s.out, line)
		}
		if t.action == "" {
			fmt.Fprintf(s.out, "--- FAIL: %s (did not finish)\n", t.name)
			s.failedN++
		}
	}
	if failedTests == 0 {
		s.failedN++ // TestMain failed or the binary crashed outside any test
	}
	for _, line := range p.output {
		fmt.Fprint(s.out, line)
	}
}

func (s *summary) addSkip(reason string, packages bool, example string) {
	key := fmt.Sprintf("%t\x00%s", packages, reason)
	r := s.reasons[key]
	if r == nil {
		r = &skipReason{reason: reason, packages: packages}
		s.reasons[key] = r
		s.rorder = append(s.rorder, key)
	}
	r.count++
	if len(r.examples) < 3 && !slices.Contains(r.examples, example) {
		r.examples = append(r.examples, example)
	}
}

// printSkips writes one line per distinct skip reason, the most frequent
// first.
func (s *summary) printSkips() {
	keys := slices.Clone(s.rorder)
	slices.SortStableFunc(keys, func(a, b string) int { return s.reasons[b].count - s.reasons[a].count })
	for _, k := range keys {
		r := s.reasons[k]
		what := "test"
		if r.packages {
			what = "package"
		}
		if r.count != 1 {
			what += "s"
		}
		eg := strings.Join(r.examples, ", ")
		if r.count > len(r.examples) {
			eg += ", …"
		}
		fmt.Fprintf(s.out, "skipped %d %s: %s (%s)\n", r.count, what, r.reason, eg)
	}
}

var logPrefix = regexp.MustCompile(`^\s+[^\s:]+\.go:\d+: `)

// testReason is the message of a skipped test: its last logged line (the
// t.Skip message) and the continuation lines after it.
func testReason(output []string) string {
	var msg []string
	for _, line := range output {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "=== "), strings.HasPrefix(line, "--- "):
		case logPrefix.MatchString(line):
			msg = []string{logPrefix.ReplaceAllString(line, "")}
		case len(msg) > 0 && strings.TrimSpace(line) != "":
			msg = append(msg, strings.TrimSpace(line))
		}
	}
	if len(msg) == 0 {
		return "(no reason given)"
	}
	return strings.Join(msg, " ")
}

// shortPkg drops the module path's host and owner: github.com/kretry/kretry/e2e → kretry/e2e.
func shortPkg(p string) string {
	if parts := strings.Split(p, "/"); len(parts) > 3 && strings.Contains(parts[0], ".") {
		return strings.Join(parts[2:], "/")
	}
	return p
}
