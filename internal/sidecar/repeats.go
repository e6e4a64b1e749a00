package sidecar

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RepeatWindow is how often a line of the Kafka client's that repeats is
// shown: the first of a kind at once, then at most one per window, which
// carries how many were held back in it.
const RepeatWindow = 30 * time.Second

// maxRepeatKinds bounds the kinds of line tracked at once; past it, a new
// kind is shown and not tracked.
const maxRepeatKinds = 256

// quietRepeats is the Kafka client's log handler: it holds back the lines
// that repeat while a broker is unreachable (franz-go retries a dial
// several times a second, and logs each failure). Only warn and error
// lines are held: the client's info lines come with log.level debug,
// where every line is wanted. Lines are of one kind when their level,
// message, broker and error are the same. The first of
// a kind is shown at once; the others logged within [RepeatWindow] of it
// are counted, and when the window ends the last of them is shown with
// `repeated` (how many were held back, itself included) and
// `repeated_since` (when the first of them was logged). A kind that keeps
// repeating is so shown once per window, and no count is lost while the
// process runs (a window still open at exit is not logged). Every
// kind's first line is shown, so nothing new is hidden. All clients built
// from one [Clients] share the handler, so a broker that three clients
// cannot reach is one kind.
type quietRepeats struct {
	slog.Handler
	kinds *repeatKinds // shared by the handlers WithAttrs and WithGroup derive
}

func newQuietRepeats(h slog.Handler, window time.Duration) quietRepeats {
	return quietRepeats{h, &repeatKinds{window: window, seen: map[repeatKind]*repeatCount{}}}
}

func (h quietRepeats) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn || !h.kinds.hold(kindOf(r), heldLine{ctx, h.Handler, r}) {
		return h.Handler.Handle(ctx, r)
	}
	return nil
}

func (h quietRepeats) WithAttrs(as []slog.Attr) slog.Handler {
	return quietRepeats{h.Handler.WithAttrs(as), h.kinds}
}

func (h quietRepeats) WithGroup(name string) slog.Handler {
	return quietRepeats{h.Handler.WithGroup(name), h.kinds}
}

type repeatKind struct {
	level       slog.Level
	msg, broker string
	err         string
}

// kindOf is r's level, message, and its broker and err attributes, the
// ones franz-go gives a failed dial or request.
func kindOf(r slog.Record) repeatKind {
	k := repeatKind{level: r.Level, msg: r.Message}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "broker":
			k.broker = a.Value.String()
		case "err":
			k.err = a.Value.String()
		}
		return true
	})
	return k
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
	seen map[repeatKind]*repeatCount
}

// repeatCount is one kind's window: open from its last line shown until
// the timer shows the last line held in it, if any.
type repeatCount struct {
	held      int       // lines held back in the window
	firstHeld time.Time // when the first of them was logged
	last      heldLine  // the last of them
	timer     *time.Timer
}

// hold reports whether line, of kind k, is held back: a window of its
// kind is open. If not, a window opens, and line is to be shown.
func (ks *repeatKinds) hold(k repeatKind, line heldLine) bool {
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
	if len(ks.seen) < maxRepeatKinds {
		c := &repeatCount{}
		c.timer = time.AfterFunc(ks.window, func() { ks.close(k, c) })
		ks.seen[k] = c
	}
	return false
}

// close ends c, the window of kind k: the last line held in it is shown
// with the count, and a window opens from now, or none when nothing was
// held (the kind's next line is shown at once).
func (ks *repeatKinds) close(k repeatKind, c *repeatCount) {
	ks.mu.Lock()
	held, since, last := c.held, c.firstHeld, c.last
	if held == 0 {
		delete(ks.seen, k)
	} else {
		*c = repeatCount{timer: c.timer}
		c.timer.Reset(ks.window)
	}
	ks.mu.Unlock()
	if held > 0 {
		last.r.AddAttrs(slog.Int("repeated", held), slog.Time("repeated_since", since))
		_ = last.h.Handle(last.ctx, last.r)
	}
}
