package dlq

import (
	"encoding/base64"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kretry/kretry/retrytopics"
)

// EntryJSON is one DLQ record as `kretry dlq list --json`, `show --json` and
// the admin API give it. Key, value and header values are UTF-8 text when
// they are (IsText: key, value, value), base64 otherwise (key_b64, value_b64); a
// null key or value has neither.
type EntryJSON struct {
	Record     string       `json:"record"` // <partition>/<offset>
	Partition  int32        `json:"partition"`
	Offset     int64        `json:"offset"`
	State      State        `json:"state"`
	ID         string       `json:"id,omitempty"` // the original's ce-id
	Key        *string      `json:"key,omitempty"`
	KeyB64     *string      `json:"key_b64,omitempty"`
	Class      string       `json:"class"`
	Status     int          `json:"status,omitempty"`
	Attempts   int64        `json:"attempts"`
	Redrives   int64        `json:"redrives"`
	First      *time.Time   `json:"first_failure,omitempty"`
	Last       *time.Time   `json:"last_failure,omitempty"`
	DeadLetter time.Time    `json:"dead_lettered"`
	Message    string       `json:"message"`
	Problem    string       `json:"problem,omitempty"` // why it cannot be redriven
	Mark       *Mark        `json:"mark,omitempty"`
	ValueBytes int          `json:"value_bytes"`
	Value      *string      `json:"value,omitempty"`
	ValueB64   *string      `json:"value_b64,omitempty"`
	Headers    []HeaderJSON `json:"headers,omitempty"` // full only: every header, kretry's first
}

// HeaderJSON is one record header in EntryJSON.
type HeaderJSON struct {
	Key      string  `json:"key"`
	Value    *string `json:"value,omitempty"`
	ValueB64 *string `json:"value_b64,omitempty"`
}

// TextOrBase64 returns b as text when IsText, else as base64; both nil for
// nil.
func TextOrBase64(b []byte) (text, b64 *string) {
	if b == nil {
		return nil, nil
	}
	if IsText(b) {
		s := string(b)
		return &s, nil
	}
	s := base64.StdEncoding.EncodeToString(b)
	return nil, &s
}

// IsText reports whether b reads as text: valid UTF-8 without control
// characters (C0 and DEL) other than tab, newline and carriage return.
// `kretry dlq show` prints anything else in hex, the API and the page in
// base64: "\x00\x01binary" is valid UTF-8 but not text.
func IsText(b []byte) bool {
	return utf8.Valid(b) && !strings.ContainsFunc(string(b), func(r rune) bool {
		return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f
	})
}

// listMessageBytes bounds the error message of a record in a list (bytes);
// the record itself (full) has all of it.
const listMessageBytes = 1024

// JSON renders e; full adds the value and every header (and the whole
// error message, cut to listMessageBytes otherwise).
func (e *Entry) JSON(full bool) EntryJSON {
	j := EntryJSON{Record: e.Ref(), Partition: e.Partition, Offset: e.Offset, State: e.State, ID: e.ID, Class: e.Class(), Status: e.Status,
		Attempts: e.Attempts, Redrives: e.Redrives, DeadLetter: e.Timestamp, Message: e.Message, Problem: e.Problem, Mark: e.Mark, ValueBytes: len(e.Value)}
	j.Key, j.KeyB64 = TextOrBase64(e.Key)
	if !e.FirstFailure.IsZero() {
		j.First = &e.FirstFailure
	}
	if !e.LastFailure.IsZero() {
		j.Last = &e.LastFailure
	}
	if !full {
		j.Message = retrytopics.Truncate(j.Message, listMessageBytes)
	}
	if full {
		j.Value, j.ValueB64 = TextOrBase64(e.Value)
		for _, h := range e.Headers {
			hj := HeaderJSON{Key: h.Key}
			hj.Value, hj.ValueB64 = TextOrBase64(h.Value)
			j.Headers = append(j.Headers, hj)
		}
	}
	return j
}
