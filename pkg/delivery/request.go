package delivery

// The app's side of the HTTP contract: reading a delivery request back
// into a Message (DESIGN.md, "HTTP contract with the app").

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DecodeKafkaHeaders returns the original record headers carried in the
// HeaderKafkaHeader field lines of h, in order, duplicates kept; nil when
// there are none. Field lines folded into one comma-separated line are
// split again. An element that is not base64 key[:base64 value] returns an
// error wrapping ErrMalformedRequest.
func DecodeKafkaHeaders(h http.Header) ([]kgo.RecordHeader, error) {
	var out []kgo.RecordHeader
	for i, line := range h.Values(HeaderKafkaHeader) {
		for elem := range strings.SplitSeq(line, ",") {
			elem = strings.Trim(elem, " \t")
			k, v, hasValue := strings.Cut(elem, ":")
			key, err := b64.DecodeString(k)
			if err != nil {
				return nil, fmt.Errorf("%w: %s[%d] %q: key: %w", ErrMalformedRequest, HeaderKafkaHeader, i, elem, err)
			}
			rh := kgo.RecordHeader{Key: string(key)}
			if hasValue {
				val, err := b64.DecodeString(v)
				if err != nil {
					return nil, fmt.Errorf("%w: %s[%d] %q: value: %w", ErrMalformedRequest, HeaderKafkaHeader, i, elem, err)
				}
				rh.Value = append([]byte{}, val...)
			}
			out = append(out, rh)
		}
	}
	return out, nil
}

// MessageFromRequest reads a delivery request back into a Message: the
// inverse of what HTTP sends, for applications written in Go and for tests.
// It reads r.Body to the end; bound it (http.MaxBytesReader) if the peer is
// not trusted. ce-specversion, ce-id, ce-kafkatopic, ce-kafkapartition,
// ce-kafkaoffset and ce-attempt are required; ce-time, ce-kafkakey,
// kretry-tombstone and kretry-kafka-header are optional. A header that is
// missing, repeated, or does not parse returns an error wrapping
// ErrMalformedRequest.
func MessageFromRequest(r *http.Request) (*Message, error) {
	h := ceHeaders(r.Header)
	var m Message
	if err := h.required(&m); err != nil {
		return nil, err
	}
	tombstone, err := h.optional(&m)
	if err != nil {
		return nil, err
	}
	var body []byte
	if r.Body != nil {
		if body, err = io.ReadAll(r.Body); err != nil {
			return nil, fmt.Errorf("delivery: record %s: reading body: %w", m.ID, err)
		}
	}
	switch {
	case tombstone && len(body) > 0:
		return nil, fmt.Errorf("%w: %s: %s but the body has %d bytes", ErrMalformedRequest, HeaderTombstone, TombstoneMarker, len(body))
	case !tombstone:
		m.Value = append([]byte{}, body...)
	}
	return &m, nil
}

// ceHeaders reads the headers of a delivery request.
type ceHeaders http.Header

// get is header name's one value; ok false when it is absent (an error
// when required), an error when it is given more than once.
func (h ceHeaders) get(name string, required bool) (v string, ok bool, err error) {
	vs := http.Header(h).Values(name)
	switch {
	case len(vs) == 0 && required:
		return "", false, fmt.Errorf("%w: header %s missing", ErrMalformedRequest, name)
	case len(vs) == 0:
		return "", false, nil
	case len(vs) > 1:
		return "", false, fmt.Errorf("%w: header %s: %d values %q, want one", ErrMalformedRequest, name, len(vs), vs)
	}
	return vs[0], true, nil
}

// badHeader is ErrMalformedRequest for header name's value v, which is not want.
func badHeader(name, v, want string) error {
	return fmt.Errorf("%w: header %s: %q is not %s", ErrMalformedRequest, name, v, want)
}

// integer is required header name as an integer of bits bits, no less
// than least; want says what it must be in the error.
func (h ceHeaders) integer(name string, bits int, least int64, want string) (int64, error) {
	v, _, err := h.get(name, true)
	if err != nil {
		return 0, err
	}
	n, perr := strconv.ParseInt(v, 10, bits)
	if perr != nil || n < least {
		return 0, badHeader(name, v, want)
	}
	return n, nil
}

// required reads the headers every delivery has into m: the spec version,
// ce-id, the record's topic, partition and offset, and the attempt.
func (h ceHeaders) required(m *Message) error {
	v, _, err := h.get(HeaderCESpecVersion, true)
	if err != nil {
		return err
	}
	if v != CESpecVersion {
		return badHeader(HeaderCESpecVersion, v, CESpecVersion)
	}
	if m.ID, _, err = h.get(HeaderCEID, true); err != nil {
		return err
	}
	if m.ID == "" {
		return badHeader(HeaderCEID, m.ID, "a non-empty id")
	}
	if m.Topic, _, err = h.get(HeaderCEKafkaTopic, true); err != nil {
		return err
	}
	p, err := h.integer(HeaderCEKafkaPartition, 32, 0, "a partition (int32 ≥ 0)")
	if err != nil {
		return err
	}
	m.Partition = int32(p)
	if m.Offset, err = h.integer(HeaderCEKafkaOffset, 64, 0, "an offset (int64 ≥ 0)"); err != nil {
		return err
	}
	a, err := h.integer(HeaderCEAttempt, strconv.IntSize, 1, "an attempt (integer ≥ 1)")
	m.Attempt = int(a)
	return err
}

// optional reads the headers a delivery may have into m: the time, the
// key, the record headers, the gap and redrive headers; tombstone reports
// the tombstone marker.
func (h ceHeaders) optional(m *Message) (tombstone bool, err error) {
	v, ok, err := h.get(HeaderCETime, false)
	if err != nil {
		return false, err
	} else if ok {
		var perr error
		if m.Timestamp, perr = time.Parse(time.RFC3339Nano, v); perr != nil {
			return false, badHeader(HeaderCETime, v, "an RFC 3339 time")
		}
	}
	if v, ok, err = h.get(HeaderCEKafkaKey, false); err != nil {
		return false, err
	} else if ok {
		key, kerr := b64.DecodeString(v)
		if kerr != nil {
			return false, badHeader(HeaderCEKafkaKey, v, "standard padded base64")
		}
		m.Key = append([]byte{}, key...)
	}
	if v, ok, err = h.get(HeaderTombstone, false); err != nil {
		return false, err
	} else if ok {
		if v != TombstoneMarker {
			return false, badHeader(HeaderTombstone, v, TombstoneMarker)
		}
		tombstone = true
	}
	hh := http.Header(h)
	if m.Headers, err = DecodeKafkaHeaders(hh); err != nil {
		return false, err
	}
	m.GapAfter = hh.Get(HeaderGapAfter)
	if v := hh.Get(HeaderRedriveCount); v != "" {
		var perr error
		if m.Redrives, perr = strconv.Atoi(v); perr != nil || m.Redrives < 1 {
			return false, badHeader(HeaderRedriveCount, v, "a redrive count (integer ≥ 1)")
		}
		m.RedriveID = hh.Get(HeaderRedriveID)
	}
	return tombstone, nil
}
