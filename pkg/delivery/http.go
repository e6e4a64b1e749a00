package delivery

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kretry/kretry/pkg/flow"
)

// HTTP header names of the wire contract with the application (DESIGN.md,
// "HTTP contract with the app"). One record is one POST in CloudEvents 1.0
// HTTP binary mode (CloudEvents HTTP protocol binding §3.1): the body is the
// record value, byte for byte, and the attributes travel as ce-* headers.
// HTTP header names are case-insensitive; Go canonicalises them on the wire
// (Ce-Id), so read them with http.Header.Get / Values. The W3C trace
// context headers, HeaderTraceParent and HeaderTraceState, are in trace.go.
const (
	// HeaderCESpecVersion is always CESpecVersion ("1.0").
	HeaderCESpecVersion = "ce-specversion"
	// HeaderCEID is Message.ID, "<topic>/<partition>/<offset>" of the
	// original record (built from the coordinates when Message.ID is
	// empty): the same on every attempt, so it is the idempotency key.
	HeaderCEID = "ce-id"
	// HeaderCESource is CESource(topic), e.g. "kafka:///orders".
	HeaderCESource = "ce-source"
	// HeaderCEType is HTTPConfig.CEType, default DefaultCEType.
	HeaderCEType = "ce-type"
	// HeaderCETime is the original record timestamp, RFC 3339 UTC with
	// milliseconds (2006-01-02T15:04:05.000Z). Absent for a zero timestamp.
	HeaderCETime = "ce-time"
	// HeaderCEKafkaTopic is the original topic.
	HeaderCEKafkaTopic = "ce-kafkatopic"
	// HeaderCEKafkaPartition is the original partition (decimal).
	HeaderCEKafkaPartition = "ce-kafkapartition"
	// HeaderCEKafkaOffset is the original offset (decimal).
	HeaderCEKafkaOffset = "ce-kafkaoffset"
	// HeaderCEKafkaKey is the record key in base64 (RFC 4648 §4, standard
	// alphabet, padded). Absent for a null key; present and empty for an
	// empty key.
	HeaderCEKafkaKey = "ce-kafkakey"
	// HeaderCEAttempt is Message.Attempt (decimal): 1 on the first
	// delivery, 2 on the first retry, …
	HeaderCEAttempt = "ce-attempt"
	// HeaderContentType is the value of the first original record header
	// named content-type (any case) when it is a valid HTTP field value
	// and not a CloudEvents event format (application/cloudevents…, which
	// would make the request structured mode: see isCloudEventsFormat),
	// otherwise DefaultContentType.
	HeaderContentType = "content-type"
	// HeaderTombstone is set to TombstoneMarker when the record value is
	// null (a tombstone); the body is then empty. An empty, non-null value
	// has an empty body and no marker.
	HeaderTombstone = "kretry-tombstone"
	// HeaderGapAfter names (by ce-id) a record of the same key that was
	// dead-lettered before this one was delivered, with on_dead_letter:
	// release: the application sees the gap in its sequence. Absent
	// otherwise.
	HeaderGapAfter = "kretry-gap-after"
	// HeaderRedriveCount is Message.Redrives (decimal, ≥ 1) and
	// HeaderRedriveID Message.RedriveID, on a record an operator redrove
	// from the DLQ; both absent otherwise.
	HeaderRedriveCount = "kretry-redrive-count"
	HeaderRedriveID    = "kretry-redrive-id"
	// HeaderKafkaHeader carries the original record headers, one field line
	// per record header, in record order, duplicates kept:
	//
	//	kretry-kafka-header: <base64(key)>:<base64(value)>
	//	kretry-kafka-header: <base64(key)>            (null value: no colon)
	//
	// base64 is RFC 4648 §4 (standard alphabet, padded); ':' and ',' are not
	// in that alphabet, so the form is binary-safe and survives a proxy that
	// folds the field lines into one comma-separated line (RFC 9110 §5.3).
	// DecodeKafkaHeaders reverses it.
	HeaderKafkaHeader = "kretry-kafka-header"
	// HeaderRetryAfter in a non-2xx answer sets a lower bound on the next
	// delay (RFC 9110 §10.2.3); see StatusError.RetryAfter.
	HeaderRetryAfter = "retry-after"
)

// Values and defaults of the wire contract.
const (
	// CESpecVersion is the CloudEvents version spoken.
	CESpecVersion = "1.0"
	// DefaultCEType is the ce-type when HTTPConfig.CEType is empty.
	DefaultCEType = "kafka.record"
	// DefaultContentType is the Content-Type when the record has no usable
	// content-type header.
	DefaultContentType = "application/octet-stream"
	// TombstoneMarker is the value of HeaderTombstone.
	TombstoneMarker = "true"
	// CETimeFormat is the layout of HeaderCETime.
	CETimeFormat = "2006-01-02T15:04:05.000Z07:00"

	// DefaultHTTPTimeout is the per-delivery timeout when
	// HTTPConfig.Timeout is 0 (flow.DefaultDeliveryTimeout).
	DefaultHTTPTimeout = flow.DefaultDeliveryTimeout
	// DefaultMaxInFlight is the connection bound when HTTPConfig.MaxInFlight
	// is 0 (flow.DefaultMaxInFlight).
	DefaultMaxInFlight = flow.DefaultMaxInFlight
	// MaxErrorBody bounds StatusError.Body, in bytes.
	MaxErrorBody = 4 << 10
	// MaxRetryAfter caps StatusError.RetryAfter.
	MaxRetryAfter = 24 * time.Hour

	// maxDrain bounds the bytes of a response body read (after the first
	// MaxErrorBody) only so that the connection can be reused; a longer body
	// costs a new connection instead of unbounded reading.
	maxDrain = 64 << 10
)

// ErrMalformedRequest is wrapped by the errors of MessageFromRequest and
// DecodeKafkaHeaders when the request does not follow the wire contract; an
// application answers such a request with 400.
var ErrMalformedRequest = errors.New("malformed kretry request")

var b64 = base64.StdEncoding.Strict()

// CESource returns the ce-source of records from topic:
//
//	kafka:///<topic>
//
// a URI reference with the kafka scheme, an empty authority (the attribute
// must not change when the broker list does) and the topic, escaped with
// url.PathEscape, as its path. Legal Kafka topic names ([a-zA-Z0-9._-]) are
// never escaped, so "orders" gives "kafka:///orders".
func CESource(topic string) string { return "kafka:///" + url.PathEscape(topic) }

// HTTPConfig configures HTTP. It mirrors the app section of the config.
type HTTPConfig struct {
	// URL receives one POST per record; http or https.
	URL string
	// Timeout bounds one delivery, from sending the request to reading the
	// answer. 0 means DefaultHTTPTimeout.
	Timeout time.Duration
	// MaxInFlight bounds the connections to the application, idle and busy.
	// 0 means DefaultMaxInFlight.
	MaxInFlight int
	// CEType is the ce-type attribute. "" means DefaultCEType.
	CEType string
}

// HTTP delivers records to the application as CloudEvents over HTTP; see the
// Header constants for the request and StatusError for the answer. It is
// safe for concurrent use.
type HTTP struct {
	url       string
	timeout   time.Duration
	ceType    string
	client    *http.Client
	transport *http.Transport
}

var _ Deliverer = (*HTTP)(nil)

// NewHTTP checks cfg, fills its defaults and returns an HTTP with its own
// connection pool: keep-alive, at most MaxInFlight connections, no proxy
// (the application is local; HTTP_PROXY and friends are ignored), redirects
// not followed.
func NewHTTP(cfg HTTPConfig) (*HTTP, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("delivery: app url %q: %w", cfg.URL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("delivery: app url %q: must be http://host[:port]/path or https://…", cfg.URL)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("delivery: app timeout %q: must not be negative", cfg.Timeout)
	}
	if cfg.MaxInFlight < 0 {
		return nil, fmt.Errorf("delivery: app max_in_flight %d: must not be negative", cfg.MaxInFlight)
	}
	if !validFieldValue(cfg.CEType) {
		return nil, fmt.Errorf("delivery: ce type %q: must be printable, without control characters", cfg.CEType)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultHTTPTimeout
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.CEType == "" {
		cfg.CEType = DefaultCEType
	}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   cfg.Timeout,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:           cfg.MaxInFlight,
		MaxIdleConnsPerHost:    cfg.MaxInFlight,
		MaxConnsPerHost:        cfg.MaxInFlight,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    cfg.Timeout,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &HTTP{
		url:     cfg.URL,
		timeout: cfg.Timeout,
		ceType:  cfg.CEType,
		client: &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
		transport: tr,
	}, nil
}

// Close closes the idle connections. Deliver may still be called; it opens
// new ones.
func (h *HTTP) Close() { h.transport.CloseIdleConnections() }

// Deliver POSTs m and waits at most the configured timeout for the answer.
//
// A 2xx answer returns nil. Any other final answer, including 1xx and 3xx
// (redirects are not followed), returns a *StatusError. A failure to send
// or to receive returns the *url.Error of net/http, which wraps the cause:
// context.DeadlineExceeded on timeout, syscall.ECONNREFUSED when the
// application is down, and so on. Classify routes all of them.
//
// The request carries W3C trace context (traceparent, tracestate): the
// span in ctx when there is one, which also gets the answer's status as
// http.response.status_code; otherwise the record's own traceparent and
// tracestate headers, passed on unchanged.
func (h *HTTP) Deliver(ctx context.Context, m *Message) error {
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(m.Value))
	if err != nil {
		return fmt.Errorf("delivery: record %s: %w", m.ID, err)
	}
	writeHeaders(req.Header, m, h.ceType)
	writeTraceContext(ctx, req.Header, m)
	resp, err := h.client.Do(req)
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %w", ErrClosedBeforeAnswer, err) // net/http says only "EOF"
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
		return nil
	}
	se := &StatusError{
		Status:     resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get(HeaderRetryAfter), time.Now()),
	}
	// The only 1xx net/http returns is 101, whose body is the raw
	// connection: reading it would outlast the timeout (the context no
	// longer governs a switched connection), so it is closed unread.
	if resp.StatusCode >= 200 {
		se.Body = errorMessage(readErrorBody(resp.Body), resp.Header.Get("Content-Type"))
		_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	}
	return se
}

func writeHeaders(hdr http.Header, m *Message, ceType string) {
	id := m.ID
	if id == "" {
		id = flow.RecordID(m.Topic, m.Partition, m.Offset)
	}
	hdr.Set(HeaderCESpecVersion, CESpecVersion)
	hdr.Set(HeaderCEID, id)
	hdr.Set(HeaderCESource, CESource(m.Topic))
	hdr.Set(HeaderCEType, ceType)
	if !m.Timestamp.IsZero() {
		hdr.Set(HeaderCETime, m.Timestamp.UTC().Format(CETimeFormat))
	}
	hdr.Set(HeaderCEKafkaTopic, m.Topic)
	hdr.Set(HeaderCEKafkaPartition, strconv.FormatInt(int64(m.Partition), 10))
	hdr.Set(HeaderCEKafkaOffset, strconv.FormatInt(m.Offset, 10))
	if m.Key != nil {
		hdr.Set(HeaderCEKafkaKey, b64.EncodeToString(m.Key))
	}
	hdr.Set(HeaderCEAttempt, strconv.Itoa(m.Attempt))
	hdr.Set(HeaderContentType, contentType(m.Headers))
	if m.Value == nil {
		hdr.Set(HeaderTombstone, TombstoneMarker)
	}
	if m.GapAfter != "" {
		hdr.Set(HeaderGapAfter, m.GapAfter)
	}
	if m.Redrives > 0 {
		hdr.Set(HeaderRedriveCount, strconv.Itoa(m.Redrives))
		hdr.Set(HeaderRedriveID, m.RedriveID)
	}
	for _, rh := range m.Headers {
		hdr.Add(HeaderKafkaHeader, encodeKafkaHeader(rh))
	}
}

// contentType returns the first record header named content-type, when it
// can be sent as an HTTP field value, else DefaultContentType.
func contentType(hs []kgo.RecordHeader) string {
	for _, rh := range hs {
		if !strings.EqualFold(rh.Key, HeaderContentType) {
			continue
		}
		if v := string(rh.Value); strings.TrimSpace(v) != "" && validFieldValue(v) && !isCloudEventsFormat(v) {
			return v
		}
		break
	}
	return DefaultContentType
}

// validFieldValue reports whether net/http will send v as a header value:
// no control characters other than HTAB (RFC 9110 §5.5).
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

func encodeKafkaHeader(rh kgo.RecordHeader) string {
	k := b64.EncodeToString([]byte(rh.Key))
	if rh.Value == nil {
		return k
	}
	return k + ":" + b64.EncodeToString(rh.Value)
}

// readErrorBody returns the first MaxErrorBody bytes of r as valid UTF-8:
// a rune cut by the bound is dropped, invalid bytes become U+FFFD, control
// characters are kept (the error-message header is binary-safe).
func readErrorBody(r io.Reader) string {
	buf := make([]byte, MaxErrorBody)
	n, _ := io.ReadFull(r, buf) // a short or failed read keeps what came
	b := buf[:n]
	if n == len(buf) {
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	s := strings.ToValidUTF8(string(b), string(utf8.RuneError))
	for len(s) > MaxErrorBody { // replacements can grow it
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// parseRetryAfter parses a Retry-After value (RFC 9110 §10.2.3):
// delay-seconds or an HTTP-date, relative to now. A date in the past, an
// empty or unparsable value give 0; anything longer is capped at
// MaxRetryAfter.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.Trim(v, " \t")
	if v == "" {
		return 0
	}
	if strings.Trim(v, "0123456789") == "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > uint64(MaxRetryAfter/time.Second) { // only ErrRange is possible
			return MaxRetryAfter
		}
		return time.Duration(n) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return min(max(t.Sub(now), 0), MaxRetryAfter)
}
