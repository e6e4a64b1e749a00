package dlq

import (
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// Stats is what is in a DLQ at a glance.
type Stats struct {
	Total      int `json:"total"`
	Waiting    int `json:"waiting"`
	Redriven   int `json:"redriven"`
	Discarded  int `json:"discarded"`
	Unreadable int `json:"unreadable"` // waiting records without readable kretry headers
	// ByClass and ByStatus count the waiting records by error class and
	// HTTP status ("none" for a failure without one).
	ByClass  map[string]int `json:"by_class"`
	ByStatus map[string]int `json:"by_status"`
	// Fingerprints group the waiting records by class, status and error
	// message with its numbers and ids blanked, most records first.
	Fingerprints []Fingerprint `json:"fingerprints"`
	// Oldest is when the oldest waiting record was dead-lettered (zero when
	// none waits).
	Oldest time.Time `json:"oldest,omitzero"`
}

// Fingerprint is one group of similar failures.
type Fingerprint struct {
	ID     string    `json:"id"` // 8 hex digits
	Class  string    `json:"class"`
	Status int       `json:"status,omitempty"`
	Sample string    `json:"sample"` // the normalized message
	Count  int       `json:"count"`
	Oldest time.Time `json:"oldest"`
}

// StatsOf summarizes entries (all states).
func StatsOf(entries []*Entry) *Stats {
	s := &Stats{ByClass: map[string]int{}, ByStatus: map[string]int{}, Fingerprints: []Fingerprint{}}
	fps := map[string]*Fingerprint{}
	for _, e := range entries {
		s.Total++
		switch e.State {
		case Redriven:
			s.Redriven++
			continue
		case Discarded:
			s.Discarded++
			continue
		}
		s.Waiting++
		if e.ID == "" {
			s.Unreadable++
		}
		s.ByClass[e.Class()]++
		st := "none"
		if e.Status != 0 {
			st = strconv.Itoa(e.Status)
		}
		s.ByStatus[st]++
		if s.Oldest.IsZero() || e.Timestamp.Before(s.Oldest) {
			s.Oldest = e.Timestamp
		}
		fp := fingerprint(e)
		if f, ok := fps[fp.ID]; ok {
			f.Count++
			if e.Timestamp.Before(f.Oldest) {
				f.Oldest = e.Timestamp
			}
		} else {
			fps[fp.ID] = &fp
		}
	}
	for _, f := range fps {
		s.Fingerprints = append(s.Fingerprints, *f)
	}
	slices.SortFunc(s.Fingerprints, func(a, b Fingerprint) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return a.Oldest.Compare(b.Oldest)
	})
	return s
}

// Numbers, hex ids and UUIDs vary between records of one failure.
var blank = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|\b[0-9a-fA-F]*[0-9][0-9a-fA-F]*\b`)

// fingerprint is e's failure group, Count 1.
func fingerprint(e *Entry) Fingerprint {
	msg := e.Message
	if len(msg) > 512 {
		msg = msg[:512]
	}
	if !utf8.ValidString(msg) {
		msg = string([]rune(msg)) // invalid bytes become U+FFFD
	}
	norm := blank.ReplaceAllString(msg, "#")
	if r := []rune(norm); len(r) > 120 {
		norm = string(r[:120]) + "…"
	}
	h := fnv.New32a()
	h.Write([]byte(e.Class() + "\x00" + strconv.Itoa(e.Status) + "\x00" + norm))
	return Fingerprint{ID: strconv.FormatUint(uint64(h.Sum32())|1<<32, 16)[1:], Class: e.Class(), Status: e.Status, Sample: norm, Count: 1, Oldest: e.Timestamp}
}
