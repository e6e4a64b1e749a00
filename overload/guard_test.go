package overload

import (
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
