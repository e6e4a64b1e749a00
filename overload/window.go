package overload

import "math"

// window holds the last size non-permanent outcomes of one kind, key ""
// for a success: the breaker's evidence.
type window struct {
	cfg      BreakerConfig
	size     int // BreakerConfig.Window, or more while recovering (see relapse)
	keys     []string
	failed   []bool
	head     int
	failures int
	counted  map[string]int // failure entries per key
	// full: count at least a whole window (after the breaker closed: the
	// records held or left behind by the outage come first, and must not
	// reopen it at once), else half of one.
	full bool
}

func newWindow(cfg BreakerConfig) window {
	return window{cfg: cfg, size: cfg.Window, counted: map[string]int{}}
}

// tripped reports whether the window's failures (one per key) are at
// least FailureRatio of its deliveries, counting at least size/2 of
// them (size when full): with the defaults, 10 of the last 20, or 5
// keys failing with no success between (a topic with few keys; one key
// failing alone never opens it).
func (w *window) tripped() bool {
	floor := (w.size + 1) / 2
	if w.full {
		floor = w.size
	}
	volume := max(len(w.keys), floor)
	return w.failures >= max(2, int(math.Ceil(w.cfg.FailureRatio*float64(volume))))
}

// add adds an OK or Transient outcome; a key's failure counts once.
func (w *window) add(o Outcome) {
	fail := o.Class == Transient
	if fail && w.counted[o.Key] > 0 {
		return // one key failing again and again is that key's problem
	}
	key := ""
	if fail {
		key = o.Key
	}
	if len(w.keys) < w.size {
		w.keys, w.failed = append(w.keys, key), append(w.failed, fail)
	} else {
		if w.failed[w.head] {
			w.failures--
			if w.counted[w.keys[w.head]]--; w.counted[w.keys[w.head]] <= 0 {
				delete(w.counted, w.keys[w.head])
			}
		}
		w.keys[w.head], w.failed[w.head] = key, fail
		w.head = (w.head + 1) % w.size
	}
	if fail {
		w.failures++
		w.counted[key]++
	}
}

// reset empties the window and gives it size entries.
func (w *window) reset(size int, full bool) {
	w.keys, w.failed, w.head, w.failures, w.size, w.full = w.keys[:0], w.failed[:0], 0, 0, size, full
	clear(w.counted)
}

// shrink keeps the newest size entries (oldest first) and no floor.
func (w *window) shrink(size int) {
	n := len(w.keys)
	keys, failed := make([]string, 0, n), make([]bool, 0, n)
	for i := range n {
		j := (w.head + i) % n
		keys, failed = append(keys, w.keys[j]), append(failed, w.failed[j])
	}
	w.reset(size, false)
	for i := max(0, n-size); i < n; i++ {
		o := Outcome{Class: OK}
		if failed[i] {
			o = Outcome{Class: Transient, Key: keys[i]}
		}
		w.add(o)
	}
}

// Clumping. The windows count deliveries in the order they end, and slow
// failures that started together end together: 20 deliveries that began
// in the same millisecond and time out a second later fill a window of 20
// at once, although hundreds of deliveries that began around them
// succeeded in that second (kretry demo with the default window: its
// breaker opened in 7 of 7 runs on its 1% of records that time out once).
// So a transient failure is also judged over its own flight, from its
// Admit to its Done: when at least Window deliveries ended meanwhile or
// are still running, and fewer than FailureRatio of them failed, counting
// every delivery still running as failing, the dependency served the
// traffic around it, and the failure does not count towards opening (it
// is routed as usual). Running deliveries count as failing because a
// hanging call is known late: when the dependency hangs most calls, its
// few fast successes end while the failures that started with them are
// still running. A dependency that stopped answering never overtakes a
// failure (nothing succeeds during its flight), and a fast failure (a
// refusal, a 503) has a flight too short to be overtaken: both count as
// before.

// tally counts the OK and transient outcomes a gate has seen; as the
// evidence of one flight (since), failed includes the running deliveries.
type tally struct{ ok, failed uint64 }

func (c *tally) add(o Outcome) {
	switch o.Class {
	case OK:
		c.ok++
	case Transient:
		c.failed++
	}
}

// since is what ended between t's Admit and now, the running deliveries
// counted as failed; zero for a Ticket not from Admit.
func (c tally) since(t Ticket, running int) tally {
	if !t.timed {
		return tally{}
	}
	return tally{ok: c.ok - t.start.ok, failed: c.failed - t.start.failed + uint64(running)}
}

// overtaken reports whether a transient failure, during being its
// flight's evidence (since), says nothing of the dependency (see
// Clumping).
func (b *breaker) overtaken(during tally) bool {
	n := during.ok + during.failed
	if n < uint64(max(1, b.cfg.Window)) {
		return false
	}
	trips := uint64(max(2, math.Ceil(b.cfg.FailureRatio*float64(n))))
	return during.failed < trips
}
