package overload

import (
	"sort"
	"strings"
	"unicode"
)

// Fingerprint is one kind of failure: its class, its answer (an HTTP
// status, "timeout", "connection", "other") and the start of its error
// message with each number masked as '#', so that "order 17 not found"
// and "order 180 not found" are one fingerprint.
type Fingerprint struct {
	Class   string // "transient" or "permanent"
	Answer  string
	Message string
}

// FingerprintCount is a fingerprint and how many failed deliveries had it.
type FingerprintCount struct {
	Fingerprint
	Count int64
}

const (
	// fingerprintPrefix bounds the message part of a fingerprint, in
	// bytes.
	fingerprintPrefix = 60
	// maxFingerprints bounds the fingerprints kept (space-saving: past it
	// the least counted one makes room, its count carried over).
	maxFingerprints = 100
)

// fingerprintOf masks digits and cuts the message.
func fingerprintOf(o Outcome) Fingerprint {
	class := "transient"
	if o.Class == Permanent {
		class = "permanent"
	}
	var b strings.Builder
	digits := false
	for _, r := range o.Message {
		if b.Len() >= fingerprintPrefix {
			break
		}
		switch {
		case unicode.IsDigit(r):
			if digits {
				continue // a number is one '#'
			}
			r = '#'
		case r == '\n' || r == '\r':
			r = ' '
		}
		digits = r == '#'
		b.WriteRune(r)
	}
	return Fingerprint{Class: class, Answer: o.Answer, Message: strings.TrimSpace(b.String())}
}

// countFingerprint counts one failure (the Gate holds its lock).
func (g *Gate) countFingerprint(o Outcome) {
	if o.Class != Transient && o.Class != Permanent {
		return
	}
	f := fingerprintOf(o)
	if _, ok := g.prints[f]; !ok && len(g.prints) >= maxFingerprints {
		var least Fingerprint
		n := int64(-1)
		for k, v := range g.prints {
			if n < 0 || v < n {
				least, n = k, v
			}
		}
		delete(g.prints, least)
		g.prints[f] = n // space-saving: an upper bound of its count
	}
	g.prints[f]++
}

// TopFailures returns the n most frequent failure fingerprints since the
// start, most frequent first (ties by fingerprint).
func (g *Gate) TopFailures(n int) []FingerprintCount {
	g.mu.Lock()
	out := make([]FingerprintCount, 0, len(g.prints))
	for f, c := range g.prints {
		out = append(out, FingerprintCount{f, c})
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		a, b := out[i].Fingerprint, out[j].Fingerprint
		return a.Class+a.Answer+a.Message < b.Class+b.Answer+b.Message
	})
	return out[:min(n, len(out))]
}
