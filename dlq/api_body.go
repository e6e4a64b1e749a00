package dlq

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// decodeMove reads the one MoveRequest object of r's body. The error is in
// the API's words (the field, what it wants, what it got), never Go's
// unmarshal message; code is 413 for a body over maxBody, else 400.
func decodeMove(w http.ResponseWriter, r *http.Request) (body MoveRequest, code int, err error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		return body, http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes: send a filter, not the records", maxBody)
	}
	if err != nil {
		return body, http.StatusBadRequest, fmt.Errorf("request body: reading it: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return body, http.StatusBadRequest, bodyError(raw, err)
	}
	// One JSON object and nothing after it: a second object (say
	// {"dry_run":true}) would otherwise be ignored and the move run.
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return body, http.StatusBadRequest, errors.New("request body: data after the JSON object: send one MoveRequest object, nothing after it")
	}
	return body, http.StatusOK, nil
}

// moveFieldWants says what each MoveRequest field takes, by its JSON path.
var moveFieldWants = map[string]string{
	"rate":           "a number of records per second",
	"limit":          "a whole number of records (0: all)",
	"dry_run":        "true or false",
	"reason":         "a string",
	"by":             "a string",
	"filter":         `an object such as {"class":["permanent"]}`,
	"filter.status":  "a list of HTTP statuses such as [422, 503]",
	"filter.state":   `a list of strings such as ["waiting"]`,
	"filter.class":   `a list of strings such as ["permanent"]`,
	"filter.header":  `a list of strings such as ["tenant=7"]`,
	"filter.records": `a list of strings such as ["0/42"]`,
}

// bodyError turns a json.Decoder error on raw into the API's words.
func bodyError(raw []byte, err error) error {
	const hint = `send one MoveRequest object, such as {"filter":{"class":["permanent"]},"rate":5}`
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &typ) && typ.Field != "":
		want, ok := moveFieldWants[typ.Field]
		if !ok {
			want = "a string"
		}
		return fmt.Errorf("%s: want %s, got %s", typ.Field, want, fieldValue(raw, typ.Field))
	case errors.As(err, &typ):
		return fmt.Errorf("request body: want a JSON object, got a JSON %s: %s", typ.Value, hint)
	case errors.As(err, &syn):
		return fmt.Errorf("request body: not JSON (at byte %d): %s", syn.Offset, hint)
	case errors.Is(err, io.EOF):
		return fmt.Errorf("request body is empty: %s", hint)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("request body: the JSON ends too early: %s", hint)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if inFilter(raw, name) {
			return fmt.Errorf("request body: unknown field %s in filter: a filter has state, class, status, since, until, key, key_b64, header, grep and records (docs/DLQ.md, Admin API)", name)
		}
		return fmt.Errorf("request body: unknown field %s: a redrive or discard request has filter, limit, rate, dry_run, reason and by (docs/DLQ.md, Admin API)", name)
	}
	return fmt.Errorf("request body: %w", err)
}

// fieldValue is the JSON text at the dotted path of raw, as sent (at most
// 60 bytes), or "another type" when it cannot be found.
func fieldValue(raw []byte, path string) string {
	v := json.RawMessage(raw)
	for _, name := range strings.Split(path, ".") {
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) != nil {
			return "another type"
		}
		if v = obj[name]; v == nil {
			return "another type"
		}
	}
	s := string(bytes.TrimSpace(v))
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// inFilter reports whether the unknown field quoted (as encoding/json
// quotes it) is a key of raw's filter object and not of raw itself.
func inFilter(raw []byte, quoted string) bool {
	name, err := strconv.Unquote(quoted)
	if err != nil {
		return false
	}
	var top struct {
		Filter map[string]json.RawMessage `json:"filter"`
	}
	var keys map[string]json.RawMessage
	if json.Unmarshal(raw, &keys) != nil || json.Unmarshal(raw, &top) != nil {
		return false
	}
	_, atTop := keys[name]
	_, inF := top.Filter[name]
	return inF && !atTop
}
