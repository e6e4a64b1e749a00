package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kretry/kretry/internal/gameday"
	"github.com/kretry/kretry/internal/kafkatest"
)

// mechanismChecks are the kretry checks that need issue 11's overload
// controls (breaker, retry budget); the others hold without them.
var mechanismChecks = []string{"source_paused", "no_outage_dead_letters", "retries_within_budget",
	"healthy_keys_p99", "spike_drained", "outage_drained", "retries_spread"}

// timedChecks are the kretry checks whose limit is a time measured on this
// machine (a latency, seconds to drain): the command enforces them, but on
// a CI machine shared with the rest of the suite (2 cores, several
// brokers) they measure the machine as much as kretry, so this test logs
// them and enforces the counts (records moved, dead-lettered, lost,
// attempts, retries over budget). Speed targets belong in benchmarks that
// print figures, not in tests that fail on a slow machine.
var timedChecks = []string{"healthy_keys_p99", "spike_drained", "outage_drained"}

// plainBin is kretry built without the race detector, for the game day:
// it measures rates and latencies against a dependency of fixed capacity,
// which the race detector's slowdown (5-10×) would turn into a different
// experiment. The code it runs is race-tested by the engine's and e2e's
// other tests.
var (
	plainOnce sync.Once
	plainBin  string
	plainErr  error
)

func plainKretry(t *testing.T) string {
	t.Helper()
	plainOnce.Do(func() {
		if !raceBuild {
			plainBin = kretryBin
			return
		}
		plainBin = filepath.Join(filepath.Dir(kretryBin), "kretry-norace")
		plainErr = buildKretry(plainBin, false)
	})
	if plainErr != nil {
		t.Fatalf("building kretry without -race: %v", plainErr)
	}
	return plainBin
}

// TestGamedayQuick runs `kretry gameday --quick --json --chart FILE` on the
// pass's broker (the embedded one, or real Kafka through --brokers), and
// checks the report: every check of both peers with its figures, every
// phase, the four answers, the chart; the exit status says whether
// kretry's checks passed; nothing of kretry's run is lost and the poison
// record is dead-lettered once, with its origin; the blocking peer, for
// contrast, lets the poison record hold up healthy keys. Once kretry
// exports its breaker state (issue 11's overload controls), every kretry
// check but the timed ones (timedChecks, logged) must pass; before, only
// those that need no overload control.
func TestGamedayQuick(t *testing.T) {
	bin := plainKretry(t)
	chart := filepath.Join(t.TempDir(), "gameday.html")
	args := []string{"gameday", "--quick", "--json", "--quiet", "--chart", chart}
	if brokerKind == kafkatest.Kafka {
		args = append(args, "--brokers", strings.Join(kafkatest.New(t, kafkatest.Config{}).Addrs(), ","))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		t.Fatal(err)
	}
	code := cmd.ProcessState.ExitCode()
	var r gameday.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("exit %d, report is not JSON: %v\nstdout: %.2000s\nstderr: %s", code, err, out.String(), errb.String())
	}
	if (code == 0) != r.OK || (code != 0 && code != 1) {
		t.Errorf("exit %d with report ok=%v: want 0 exactly when ok, else 1", code, r.OK)
	}
	checkReportShape(t, &r)
	checkChart(t, chart)
	kr, bl := r.Peers[0], r.Peers[1]
	for _, name := range []string{"nothing_lost", "poison_dead_lettered"} {
		if c := checkNamed(kr, name); !c.Pass {
			t.Errorf("kretry %s failed: %s: %v %s (limit %v): %s", name, c.What, c.Value, c.Unit, c.Limit, c.Detail)
		}
	}
	if c := checkNamed(bl, "healthy_keys_p99"); c.Pass {
		t.Errorf("blocking peer: healthy keys' p99 %.1fms passed while its poison record blocked a partition for the whole backoff chain", c.Value)
	}
	poison := 0
	for _, d := range kr.DeadLetters {
		if d.Kind == "poison" {
			poison++
			if d.Class != "exhausted" || !d.Origin || d.Attempt != 4 {
				t.Errorf("kretry DLQ: poison record with class %q, attempt %d, origin %v; want exhausted, 4 (3 tiers), original coordinates", d.Class, d.Attempt, d.Origin)
			}
		}
	}
	if poison != 1 {
		t.Errorf("kretry DLQ holds the poison record %d times, want once", poison)
	}
	var failed []string
	for _, c := range kr.Checks {
		switch {
		case c.Pass:
		case slices.Contains(timedChecks, c.Name):
			t.Logf("kretry timed check over its limit on this machine (logged, not enforced here): %s: %v %s (limit %v): %s", c.Name, c.Value, c.Unit, c.Limit, c.Detail)
		default:
			failed = append(failed, c.Name+": "+c.Detail)
		}
	}
	if hasBreaker(&r) {
		if len(failed) > 0 {
			t.Errorf("kretry exports kretry_breaker_state, yet checks failed:\n%s", strings.Join(failed, "\n"))
		}
	} else {
		for _, f := range failed {
			if !slices.ContainsFunc(mechanismChecks, func(m string) bool { return strings.HasPrefix(f, m+":") }) {
				t.Errorf("kretry check failed that needs no overload control: %s", f)
			}
		}
		t.Logf("kretry exports no breaker state (overload controls not merged): %d checks fail as expected:\n%s", len(failed), strings.Join(failed, "\n"))
	}
	if t.Failed() {
		var b strings.Builder
		r.Print(&b)
		t.Logf("report:\n%s\nstderr:\n%s", b.String(), errb.String())
	}
}

// hasBreaker: kretry's /metrics had kretry_breaker_state during the run.
func hasBreaker(r *gameday.Report) bool {
	for _, p := range r.Peers[0].Timeline {
		if p.Breaker >= 0 {
			return true
		}
	}
	return false
}

func checkNamed(p *gameday.PeerReport, name string) gameday.Check {
	for _, c := range p.Checks {
		if c.Name == name {
			return c
		}
	}
	return gameday.Check{Name: name, Detail: "missing"}
}

// checkReportShape: both peers, each with every check (a group, a limit,
// a detail), every phase in order, and the four on-call answers.
func checkReportShape(t *testing.T, r *gameday.Report) {
	t.Helper()
	if len(r.Peers) != 2 || r.Peers[0].Peer != "kretry" || r.Peers[1].Peer != "blocking" {
		t.Fatalf("report peers: want kretry then blocking, got %d", len(r.Peers))
	}
	phases := []string{gameday.PhaseSteady, gameday.PhaseSpike, gameday.PhaseSlow, gameday.PhaseFailing,
		gameday.PhasePoison, gameday.PhaseBurst, gameday.PhaseDrain}
	questions := []string{gameday.QuestionBudget, gameday.QuestionDrain, gameday.QuestionRetries, gameday.QuestionDLQ}
	for _, p := range r.Peers {
		var names []string
		for _, c := range p.Checks {
			names = append(names, c.Name)
			if c.Group == "" || c.What == "" || c.Unit == "" && c.Detail == "" {
				t.Errorf("%s: check %s lacks its group, question or figures: %+v", p.Peer, c.Name, c)
			}
		}
		for _, want := range append(slices.Clone(mechanismChecks), "nothing_lost", "poison_dead_lettered") {
			if !slices.Contains(names, want) {
				t.Errorf("%s: no check %s in %v", p.Peer, want, names)
			}
		}
		var got []string
		for _, ph := range p.Phases {
			got = append(got, ph.Name)
		}
		if !slices.Equal(got, phases) {
			t.Errorf("%s: phases %v, want %v", p.Peer, got, phases)
		}
		if len(p.Answers) != len(questions) {
			t.Fatalf("%s: %d answers, want %d", p.Peer, len(p.Answers), len(questions))
		}
		for i, a := range p.Answers {
			if a.Question != questions[i] || a.Answer == "" {
				t.Errorf("%s: answer %d is %q: %q", p.Peer, i, a.Question, a.Answer)
			}
		}
		if len(p.Timeline) < 50 {
			t.Errorf("%s: %d timeline points; the sampler should take one about every 100ms", p.Peer, len(p.Timeline))
		}
	}
}

// checkChart: a self-contained HTML page with the SVG chart, every phase
// named in it, and no external reference.
func checkChart(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if !strings.HasPrefix(page, "<!doctype html>") || !strings.Contains(page, "<svg") {
		t.Fatalf("chart %s is not an HTML page with an SVG: %.200s", path, page)
	}
	for _, want := range []string{"Lag", "Enqueue and drain rate", "Retry rate", "Breaker", "Dead-lettered", gameday.PhaseFailing, gameday.PhasePoison} {
		if !strings.Contains(page, want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	for _, ext := range []string{"<script src", "<link ", "href=\"http"} {
		if strings.Contains(page, ext) {
			t.Errorf("chart is not self-contained: it has %q", ext)
		}
	}
}
