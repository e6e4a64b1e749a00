package overload

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestGuard(t *testing.T) {
	guard := GuardConfig{Enabled: true, MaxDeadLetters: 5, Window: time.Minute, Share: 0.9}
	t.Run("every record 404", func(t *testing.T) {
		g, log := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard})
		counted := 0
		for i := range 50 {
			at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
			if _, ok := g.Admit(at, false, 0); !ok {
				break
			}
			if g.Done(at, Ticket{}, notFound(fmt.Sprint("k", i))) == Count {
				counted++
			}
		}
		if counted != 5 {
			t.Errorf("%d records dead-lettered, want 5 (max_dead_letters)", counted)
		}
		s := g.Snapshot(t0)
		if s.State != Open || s.Reason != ReasonSystemic {
			t.Fatalf("%+v, want open, systemic", s)
		}
		// The example ids name records that were dead-lettered (k0..k4),
		// not k5, which tripped the guard and is held (breaker pass).
		line := log.String()
		for _, want := range []string{"level=ERROR", "status=404", "records=6", "dead_lettered=5", "keys=6", "share=1", `example_ids="orders/0/k4 orders/0/k3 orders/0/k2"`, "held_id=orders/0/k5", "resume="} {
			if !strings.Contains(line, want) {
				t.Errorf("guard line lacks %q:\n%s", want, line)
			}
		}
		// Probing: probes answered 404 again hold and lose the round; 200s close.
		at := g.breaker.until
		for i := range 2 {
			tk, _ := g.Admit(at, false, 0)
			if v := g.Done(at, tk, notFound(fmt.Sprint("probe", i))); v != Probe {
				t.Errorf("probe answered 404: %v, want Probe (the engine holds it: it would dead-letter it)", v)
			}
		}
		if s := g.Snapshot(at); s.State != Open {
			t.Fatalf("state %v after two probes answered 404, want open", s.State)
		}
		at = g.breaker.until
		for i := range 3 {
			tk, _ := g.Admit(at, false, 0)
			g.Done(at, tk, success(fmt.Sprint("p", i)))
		}
		if s := g.Snapshot(at); s.State != Closed {
			t.Errorf("state %v after successful probes, want closed", s.State)
		}
	})
	t.Run("share logged rounded", func(t *testing.T) {
		// 10 of the last 11 answered 404: share=0.91, not 0.9090909090909091.
		g, log := newTestGate(t, Config{Breaker: breakerConfig(), Guard: GuardConfig{Enabled: true, MaxDeadLetters: 10, Window: time.Minute, Share: 0.9}})
		for i := range 12 {
			o := notFound(fmt.Sprint("k", i))
			if i == 5 {
				o = success(fmt.Sprint("k", i))
			}
			deliver(t, g, t0.Add(time.Duration(i)*time.Millisecond), false, o)
		}
		if line := log.String(); !strings.Contains(line, "share=0.91 ") {
			t.Errorf("guard line lacks share=0.91:\n%s", line)
		}
	})
	t.Run("poison among successes", func(t *testing.T) {
		g, _ := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard})
		for i := range 200 {
			o := success(fmt.Sprint("k", i))
			if i%4 == 0 {
				o = notFound(fmt.Sprint("k", i))
			}
			if v := deliver(t, g, t0.Add(time.Duration(i)*time.Millisecond), false, o); v != Count {
				t.Fatalf("delivery %d: %v, want Count (poison is dead-lettered at once)", i, v)
			}
		}
	})
	t.Run("one key", func(t *testing.T) {
		g, _ := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard})
		for i := range 50 {
			if v := deliver(t, g, t0.Add(time.Duration(i)*time.Millisecond), false, notFound("k")); v != Count {
				t.Fatalf("delivery %d of one key: %v, want Count", i, v)
			}
		}
	})
	t.Run("spread beyond the window", func(t *testing.T) {
		g, _ := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard})
		for i := range 50 {
			if v := deliver(t, g, t0.Add(time.Duration(i)*20*time.Second), false, notFound(fmt.Sprint("k", i))); v != Count {
				t.Fatalf("delivery %d, 20s apart: %v, want Count", i, v)
			}
		}
	})
}

func TestTopFailures(t *testing.T) {
	g, _ := newTestGate(t, Config{})
	for i := range 30 {
		g.Done(t0, Ticket{}, Outcome{Class: Permanent, Key: "k", Answer: "404", Message: fmt.Sprintf("order %d not found\n", i)})
	}
	for range 10 {
		g.Done(t0, Ticket{}, fail("k"))
	}
	g.Done(t0, Ticket{}, success("k"))
	top := g.TopFailures(5)
	want := []FingerprintCount{
		{Fingerprint{Class: "permanent", Answer: "404", Message: "order # not found"}, 30},
		{Fingerprint{Class: "transient", Answer: "503", Message: "status #: busy"}, 10},
	}
	if len(top) != len(want) || top[0] != want[0] || top[1] != want[1] {
		t.Errorf("TopFailures = %+v, want %+v", top, want)
	}
	// Bounded: many distinct messages keep at most maxFingerprints.
	for i := range 1000 {
		g.Done(t0, Ticket{}, Outcome{Class: Transient, Key: "k", Answer: "other", Message: strings.Repeat("x", i%200+1)})
	}
	if n := len(g.TopFailures(1 << 20)); n > maxFingerprints {
		t.Errorf("%d fingerprints kept, want at most %d", n, maxFingerprints)
	}
}

// TestGuardClosesWhenOnlyHeldRecordsFail: the guard tripped on a quiet
// topic (every record so far answered 404); the held records are probed
// and fail again. A probe round that a fresh record wins while only held
// records (Again) lose it closes the breaker: the app answers what it has
// not seen, the held records fail on their own and are routed as usual
// (Count: to the DLQ). A round where a fresh record fails too stays lost:
// that is the systemic answer still.
func TestGuardClosesWhenOnlyHeldRecordsFail(t *testing.T) {
	guard := GuardConfig{Enabled: true, MaxDeadLetters: 5, Window: time.Minute, Share: 0.9}
	trip := func(t *testing.T) (*Gate, *bytes.Buffer) {
		g, log := newTestGate(t, Config{Breaker: breakerConfig(), Guard: guard})
		for i := range 6 {
			g.Admit(t0, false, 0)
			g.Done(t0, Ticket{}, notFound(fmt.Sprint("k", i)))
		}
		if s := g.Snapshot(t0); s.State != Open || s.Reason != ReasonSystemic {
			t.Fatalf("%+v, want open, systemic", s)
		}
		return g, log
	}
	held := func(key string) Outcome { o := notFound(key); o.Again = true; return o }

	// probes admits the three probes of the next round.
	probes := func(t *testing.T, g *Gate) (time.Time, []Ticket) {
		at := g.breaker.until
		var tks []Ticket
		for range 3 {
			tk, ok := g.Admit(at, false, 0)
			if !ok {
				t.Fatal("probe not admitted")
			}
			tks = append(tks, tk)
		}
		return at, tks
	}
	closed := func(t *testing.T, g *Gate, log *bytes.Buffer, at time.Time) {
		t.Helper()
		if s := g.Snapshot(at); s.State != Closed {
			t.Fatalf("state %v, want closed", s.State)
		}
		if !strings.Contains(log.String(), "only the records held since the guard tripped failed again") {
			t.Errorf("no close line:\n%s", log.String())
		}
	}
	t.Run("fresh succeeds, then a held record fails", func(t *testing.T) {
		g, log := trip(t)
		at, tks := probes(t, g)
		if v := g.Done(at, tks[0], success("fresh")); v != Count {
			t.Errorf("fresh probe's success: %v, want Count", v)
		}
		if v := g.Done(at, tks[1], held("k5")); v != Count {
			t.Errorf("held probe's failure: %v, want Count (closed: it is routed, to the DLQ)", v)
		}
		closed(t, g, log, at)
		// Closed, the other held records fail again: counted (DLQ), the
		// guard not tripped again by them.
		for i := range 10 {
			if v := deliver(t, g, at, false, held(fmt.Sprint("h", i))); v != Count {
				t.Fatalf("held record %d after the close: %v, want Count", i, v)
			}
		}
		if s := g.Snapshot(at); s.State != Closed {
			t.Errorf("state %v after the held records failed again, want closed", s.State)
		}
	})
	t.Run("a held record fails, then fresh succeeds", func(t *testing.T) {
		g, log := trip(t)
		at, tks := probes(t, g)
		if v := g.Done(at, tks[0], held("k5")); v != Probe {
			t.Errorf("held probe's failure first: %v, want Probe (held: nothing shows poison yet)", v)
		}
		if v := g.Done(at, tks[1], success("fresh")); v != Count {
			t.Errorf("fresh probe's success: %v, want Count", v)
		}
		closed(t, g, log, at)
	})
	t.Run("the round lost to held records, then its fresh probe succeeds", func(t *testing.T) {
		g, log := trip(t)
		at, tks := probes(t, g)
		g.Done(at, tks[0], held("k5"))
		g.Done(at, tks[1], held("k6"))
		if s := g.Snapshot(at); s.State != Open {
			t.Fatalf("state %v after two held probes failed, want open (round lost)", s.State)
		}
		g.Done(at, tks[2], success("fresh"))
		closed(t, g, log, at)
	})
	t.Run("a fresh record fails too", func(t *testing.T) {
		g, _ := trip(t)
		at, tks := probes(t, g)
		g.Done(at, tks[0], notFound("fresh-404"))
		g.Done(at, tks[1], success("fresh-ok"))
		if v := g.Done(at, tks[2], held("k5")); v != Probe {
			t.Errorf("held probe losing the round: %v, want Probe (held)", v)
		}
		if s := g.Snapshot(at); s.State != Open {
			t.Errorf("state %v, want open: a fresh record got the systemic answer too", s.State)
		}
	})
	t.Run("only held records", func(t *testing.T) {
		g, _ := trip(t)
		at := g.breaker.until
		for i := range 2 {
			tk, _ := g.Admit(at, false, 0)
			g.Done(at, tk, held(fmt.Sprint("k", 5+i)))
		}
		if s := g.Snapshot(at); s.State != Open {
			t.Errorf("state %v, want open: nothing showed the app answers", s.State)
		}
	})
}
