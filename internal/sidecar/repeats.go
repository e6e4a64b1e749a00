package sidecar

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"
)

// RepeatWindow is how often a line of the Kafka client's that repeats is
// shown: the first of a kind at once, then at most one per window, which
// carries how many were held back in it.
const RepeatWindow = 30 * time.Second

// maxRepeatKinds bounds the kinds of line tracked at once; past it, the
// oldest window that held nothing is closed to make room, and when every
// window held something a new kind is shown and not tracked.
const maxRepeatKinds = 256

// quietRepeats is the Kafka client's log handler: it holds back the lines
// that repeat while a broker is unreachable (franz-go retries a dial
// several times a second, and logs each failure). Only warn and error
// lines are held: the client's info lines come with log.level debug,
// where every line is wanted. Lines are of one kind when their level,
// message and attributes are the same but for numbers that are not an
// identity (kindOf). The first of a kind is shown at once; the others
// logged within [RepeatWindow] of it are counted, and when the window
// ends the last of them is shown again with `repeated` (how many were
// held back), `repeated_since` and `repeated_until` (when the first and
// the last of them were logged). A kind that keeps
// repeating is so shown once per window, and no count is lost while the
// process runs (a window still open at exit is not logged). Every
// kind's first line is shown, so nothing new is hidden. All clients built
// from one [Clients] share the handler, so a broker that three clients
// cannot reach is one kind.
type quietRepeats struct {
	slog.Handler
	kinds  *repeatKinds // shared by the handlers WithAttrs and WithGroup derive
	prefix string       // what WithAttrs and WithGroup added, part of every kind
}

func newQuietRepeats(h slog.Handler, window time.Duration) quietRepeats {
	return quietRepeats{Handler: h, kinds: &repeatKinds{window: window, seen: map[string]*repeatCount{}}}
}

func (h quietRepeats) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || !h.kinds.hold(h.prefix+kindOf(r), heldLine{ctx, h.Handler, r}) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h quietRepeats) WithAttrs(as []slog.Attr) slog.Handler {
	p := h.prefix
	for _, a := range as {
		p += a.Key + "=" + a.Value.String() + "|"
	}
	return quietRepeats{h.Handler.WithAttrs(as), h.kinds, p}
}

func (h quietRepeats) WithGroup(name string) slog.Handler {
	return quietRepeats{h.Handler.WithGroup(name), h.kinds, h.prefix + name + ".|"}
}

// identityAttrs are the attributes whose numbers tell lines apart: the
// broker, the group, the topic, the Kafka error code. In any other
// attribute a run of digits is a port, an address, a count, a duration or
// a partition, and lines that differ only there are of one kind: a dial
// that fails with a new local port each time ("read udp
// 127.0.0.1:42465->…", DNS down), the group loop's consecutive_errors and
// backoff, or the same produce error on each partition of a topic (one
// line per topic, the last partition's shown with the count).
var identityAttrs = map[string]bool{"broker": true, "node": true, "group": true, "topic": true, "error_code": true}

var digitRun = regexp.MustCompile(`[0-9]+`)

// kindOf is r's kind: its level, message and every attribute, the digits
// of those not in identityAttrs replaced by N.
func kindOf(r slog.Record) string {
	var b strings.Builder
	b.WriteString(r.Level.String() + "|" + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		v := a.Value.String()
		if !identityAttrs[a.Key] {
			v = digitRun.ReplaceAllString(v, "N")
		}
		b.WriteString("|" + a.Key + "=" + v)
		return true
	})
	return b.String()
}

// heldLine is a line held back, and the handler that would have shown it.
type heldLine struct {
	ctx context.Context
	h   slog.Handler
	r   slog.Record
}

type repeatKinds struct {
	window time.Duration

	mu   sync.Mutex
	seen map[string]*repeatCount // by kindOf
}

// repeatCount is one kind's window: open from its last line shown until
// the timer shows the last line held in it, if any.
type repeatCount struct {
	opened    time.Time // when the window opened
	held      int       // lines held back in the window
	firstHeld time.Time // when the first of them was logged
	last      heldLine  // the last of them
	timer     *time.Timer
}

// hold reports whether line, of kind k, is held back: a window of its
// kind is open. If not, a window opens, and line is to be shown. With
// maxRepeatKinds windows open, the oldest that held nothing so far (a line
// seen once) is closed to make room; if none is, line is shown and no
// window opens.
func (ks *repeatKinds) hold(k string, line heldLine) bool {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if c, open := ks.seen[k]; open {
		if c.held == 0 {
			c.firstHeld = line.r.Time
		}
		c.held++
		c.last = heldLine{line.ctx, line.h, line.r.Clone()}
		return true
	}
	if len(ks.seen) >= maxRepeatKinds {
		ks.evictOldestEmpty()
	}
	if len(ks.seen) < maxRepeatKinds {
		c := &repeatCount{opened: line.r.Time}
		c.timer = time.AfterFunc(ks.window, func() { ks.close(k, c) })
		ks.seen[k] = c
	}
	return false
}

// evictOldestEmpty closes the window opened longest ago of those that held
// nothing so far, if any. Only one: closing every empty window let a
// steady kind whose window had just reopened be closed each time, and
// none of its lines was held (a breaker round: 2,400 of 2,400 shown).
func (ks *repeatKinds) evictOldestEmpty() {
	var (
		oldest string
		at     time.Time
	)
	for k, c := range ks.seen {
		if c.held == 0 && (oldest == "" || c.opened.Before(at)) {
			oldest, at = k, c.opened
		}
	}
	if c, ok := ks.seen[oldest]; ok {
		c.timer.Stop()
		delete(ks.seen, oldest)
	}
}

// close ends c, the window of kind k: the last line held in it is shown
// again now, with the count (repeated), the time of the first and of the
// last held (repeated_since, repeated_until), and a window opens from now;
// or none when nothing was held (the kind's next line is shown at once).
// Shown at the window's end with that time, the line keeps the log in
// order: one printed after a recovery says, by repeated_until, that the
// repeats stopped before it.
func (ks *repeatKinds) close(k string, c *repeatCount) {
	ks.mu.Lock()
	if ks.seen[k] != c { // made room for another (hold) while this timer fired
		ks.mu.Unlock()
		return
	}
	held, since, last := c.held, c.firstHeld, c.last
	if held == 0 {
		delete(ks.seen, k)
	} else {
		*c = repeatCount{opened: time.Now(), timer: c.timer}
		c.timer.Reset(ks.window)
	}
	ks.mu.Unlock()
	if held > 0 {
		r := slog.NewRecord(time.Now(), last.r.Level, last.r.Message, last.r.PC)
		last.r.Attrs(func(a slog.Attr) bool { r.AddAttrs(a); return true })
		r.AddAttrs(slog.Int("repeated", held), slog.Time("repeated_since", since), slog.Time("repeated_until", last.r.Time))
		_ = last.h.Handle(last.ctx, r)
	}
}
