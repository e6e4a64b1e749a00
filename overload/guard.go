package overload

import (
	"log/slog"
	"math"
	"strings"
	"time"
)

// GuardConfig configures the systemic permanent failure guard
// (config.Guard).
type GuardConfig struct {
	Enabled bool
	// MaxDeadLetters records with the same permanent answer are
	// dead-lettered; the next one within Window opens the breaker, when
	// they are of at least two keys and the answer is at least Share of
	// the last MaxDeadLetters+1 deliveries in Window.
	MaxDeadLetters int
	Window         time.Duration
	Share          float64
}

// maxGuardEntries bounds the guard's memory: past it the oldest outcomes
// are forgotten before they leave the window.
const maxGuardEntries = 100_000

// examples is how many ce-ids the guard's log line names.
const examples = 3

type seen struct {
	at     time.Time
	answer string // "" unless permanent
	key    string
	id     string
}

// guard counts permanent answers over a time window.
type guard struct {
	cfg GuardConfig
	log *slog.Logger

	q      []seen // oldest first
	counts map[string]int
	keys   map[string]map[string]int
}

func newGuard(cfg GuardConfig, log *slog.Logger) *guard {
	return &guard{cfg: cfg, log: log, counts: map[string]int{}, keys: map[string]map[string]int{}}
}

func (g *guard) evict(now time.Time) {
	n := 0
	for n < len(g.q) && (now.Sub(g.q[n].at) > g.cfg.Window || len(g.q)-n >= maxGuardEntries) {
		s := g.q[n]
		if s.answer != "" {
			g.counts[s.answer]--
			if g.keys[s.answer][s.key]--; g.keys[s.answer][s.key] <= 0 {
				delete(g.keys[s.answer], s.key)
			}
			if g.counts[s.answer] <= 0 {
				delete(g.counts, s.answer)
				delete(g.keys, s.answer)
			}
		}
		n++
	}
	g.q = g.q[n:]
}

// observe counts o and reports whether it trips the guard. Transient
// failures count among the deliveries of the share: left out (tried 7
// December), a topic answering 503 to half its deliveries and 422 to a
// fifth tripped the guard on chance runs of 422s (a breaker helper's
// simulation: 9 false trips in 20,000 records, none with them in).
func (g *guard) observe(now time.Time, o Outcome) bool {
	g.evict(now)
	s := seen{at: now, key: o.Key, id: o.ID}
	if o.Class == Permanent {
		s.answer = o.Answer
		g.counts[s.answer]++
		if g.keys[s.answer] == nil {
			g.keys[s.answer] = map[string]int{}
		}
		g.keys[s.answer][o.Key]++
	}
	g.q = append(g.q, s)
	if s.answer == "" {
		return false
	}
	if g.counts[s.answer] <= g.cfg.MaxDeadLetters || len(g.keys[s.answer]) < 2 {
		return false
	}
	n, m := g.recent(s.answer)
	return float64(n) >= g.cfg.Share*float64(m)
}

// recent returns how many of the last m deliveries in the window were
// answered a, with m = MaxDeadLetters+1 (fewer when the window holds
// fewer). The share is judged over them, not over the whole window: after
// a minute of healthy traffic, a deploy that answers 404 to everything
// would otherwise need Share·(the minute's deliveries) dead-letters
// before the guard sees it.
func (g *guard) recent(a string) (n, m int) {
	m = min(len(g.q), g.cfg.MaxDeadLetters+1)
	for _, s := range g.q[len(g.q)-m:] {
		if s.answer == a {
			n++
		}
	}
	return n, m
}

// report logs the line that says what tripped the guard and how to resume.
func (g *guard) report(o Outcome, b *breaker) {
	// The examples are records that were dead-lettered, newest first:
	// the one that tripped the guard (the newest) is held, not in the DLQ.
	var ids []string
	for i := len(g.q) - 2; i >= 0 && len(ids) < examples; i-- {
		if g.q[i].answer == o.Answer {
			ids = append(ids, g.q[i].id)
		}
	}
	n := g.counts[o.Answer]
	r, m := g.recent(o.Answer)
	share := math.Round(float64(r)/float64(m)*100) / 100 // 0.91, not 0.9090909090909091
	g.log.Error("guard: the same permanent answer for many records of many keys; delivery stopped, nothing more is dead-lettered with this answer",
		"reason", ReasonSystemic, "status", o.Answer, "records", n, "dead_lettered", n-1, "keys", len(g.keys[o.Answer]),
		"share", share, "window", g.cfg.Window.String(), "example_ids", strings.Join(ids, " "),
		"example", o.Message, "held_id", o.ID,
		"resume", "fix the app or app.url; kretry probes after "+b.cfg.Wait.String()+", doubling up to "+b.cfg.MaxWait.String()+", and resumes by itself when a probe succeeds")
}

func (g *guard) reset() {
	g.q = g.q[:0]
	clear(g.counts)
	clear(g.keys)
}
