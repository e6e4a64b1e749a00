package dlq

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// FilterSpec is a Filter as the admin API takes it: JSON in a request
// body, or the same names as query parameters (lists comma-separated or
// repeated).
type FilterSpec struct {
	States   []string `json:"state,omitempty"`
	Classes  []string `json:"class,omitempty"`
	Statuses []int    `json:"status,omitempty"`
	Since    string   `json:"since,omitempty"` // RFC 3339
	Until    string   `json:"until,omitempty"`
	Key      *string  `json:"key,omitempty"`     // the key's bytes as UTF-8 text
	KeyB64   *string  `json:"key_b64,omitempty"` // or as base64, for a binary key
	Headers  []string `json:"header,omitempty"`  // K=V or K
	Text     string   `json:"grep,omitempty"`
	Records  []string `json:"records,omitempty"` // <partition>/<offset>
}

// Filter checks the spec and returns its Filter; the error names the field
// and the bad value.
func (s *FilterSpec) Filter() (Filter, error) {
	var f Filter
	for _, st := range s.States {
		switch State(st) {
		case Waiting, Redriven, Discarded:
			f.States = append(f.States, State(st))
		case "all":
			f.States = append(f.States, Waiting, Redriven, Discarded)
		default:
			return f, fmt.Errorf("state %q: want waiting, redriven, discarded or all", st)
		}
	}
	if err := ParseClasses(s.Classes); err != nil {
		return f, err
	}
	f.Classes = s.Classes
	for _, n := range s.Statuses {
		if n < 0 || n > 999 {
			return f, fmt.Errorf("status %d: want an HTTP status, or 0 for none", n)
		}
	}
	f.Statuses = s.Statuses
	var err error
	if f.Since, err = parseTime("since", s.Since); err != nil {
		return f, err
	}
	if f.Until, err = parseTime("until", s.Until); err != nil {
		return f, err
	}
	switch {
	case s.Key != nil && s.KeyB64 != nil:
		return f, fmt.Errorf("key and key_b64: give one")
	case s.Key != nil:
		f.Key, f.HasKey = []byte(*s.Key), true
	case s.KeyB64 != nil:
		if f.Key, err = base64.StdEncoding.DecodeString(*s.KeyB64); err != nil {
			return f, fmt.Errorf("key_b64 %q: not base64 (RFC 4648, padded)", *s.KeyB64)
		}
		f.HasKey = true
	}
	for _, h := range s.Headers {
		m, err := ParseHeaderMatch(h)
		if err != nil {
			return f, err
		}
		f.Headers = append(f.Headers, m)
	}
	f.Text = s.Text
	for _, r := range s.Records {
		if err := ParseRecord(r); err != nil {
			return f, err
		}
	}
	f.Records = s.Records
	return f, nil
}

func parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return t, fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-12-01T10:00:00Z", name, v)
	}
	return t, nil
}

// specFromQuery reads a FilterSpec from r's query parameters.
func specFromQuery(r *http.Request) (*FilterSpec, error) {
	q := r.URL.Query()
	list := func(name string) []string {
		var out []string
		for _, v := range q[name] {
			for _, p := range strings.Split(v, ",") {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, p)
				}
			}
		}
		return out
	}
	s := &FilterSpec{States: list("state"), Classes: list("class"), Since: q.Get("since"), Until: q.Get("until"),
		Headers: q["header"], Text: q.Get("grep"), Records: list("records")}
	for _, v := range list("status") {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("status %q: want an HTTP status such as 422", v)
		}
		s.Statuses = append(s.Statuses, n)
	}
	if q.Has("key") {
		k := q.Get("key")
		s.Key = &k
	}
	if q.Has("key_b64") {
		k := q.Get("key_b64")
		s.KeyB64 = &k
	}
	return s, nil
}
