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
