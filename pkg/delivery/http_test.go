package delivery

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Internal tests: they reach into the transport to count the bytes read
// from a response body, and test the unexported parsers directly.

func newServer(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func newHTTP(t testing.TB, cfg HTTPConfig) *HTTP {
	t.Helper()
	h, err := NewHTTP(cfg)
	if err != nil {
		t.Fatalf("NewHTTP(%+v): %v", cfg, err)
	}
	t.Cleanup(h.Close)
	return h
}

// received is what the application saw of one delivery.
type received struct {
	method string
	header http.Header
	body   []byte
	msg    *Message
	err    error // from MessageFromRequest
}

// capture delivers m to a server that records the request and answers 204.
func capture(t *testing.T, cfg HTTPConfig, m *Message) received {
	t.Helper()
	got := make(chan received, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading body: %v", err)
		}
		rec := received{method: r.Method, header: r.Header.Clone(), body: body}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec.msg, rec.err = MessageFromRequest(r)
		got <- rec
		w.WriteHeader(http.StatusNoContent)
	})
	cfg.URL = srv.URL + "/records"
	if err := newHTTP(t, cfg).Deliver(t.Context(), m); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	return <-got
}

func TestCESource(t *testing.T) {
	for topic, want := range map[string]string{
		"orders":       "kafka:///orders",
		"orders.retry": "kafka:///orders.retry",
		"a/b c?":       "kafka:///a%2Fb%20c%3F",
	} {
		if got := CESource(topic); got != want {
			t.Errorf("CESource(%q) = %q, want %q", topic, got, want)
		}
	}
}

func TestHTTPDeliverHeaders(t *testing.T) {
	ts := time.Date(2026, 3, 4, 6, 6, 7, 890_123_456, time.FixedZone("CET+1", 3600))
	base := func() *Message {
		return &Message{
			ID: "orders/2/42", Topic: "orders", Partition: 2, Offset: 42,
			Timestamp: ts,
			Key:       []byte("k1"),
			Value:     []byte(`{"sku":"a"}`),
			Attempt:   3,
		}
	}
	all := map[string][]string{
		HeaderCESpecVersion:    {"1.0"},
		HeaderCEID:             {"orders/2/42"},
		HeaderCESource:         {"kafka:///orders"},
		HeaderCEType:           {"kafka.record"},
		HeaderCETime:           {"2026-03-04T05:06:07.890Z"},
		HeaderCEKafkaTopic:     {"orders"},
		HeaderCEKafkaPartition: {"2"},
		HeaderCEKafkaOffset:    {"42"},
		HeaderCEKafkaKey:       {"azE="},
		HeaderCEAttempt:        {"3"},
		HeaderContentType:      {"application/octet-stream"},
		HeaderTombstone:        nil,
		HeaderKafkaHeader:      nil,
	}
	with := func(kv ...any) map[string][]string {
		m := make(map[string][]string, len(all))
		for k, v := range all {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)], _ = kv[i+1].([]string)
		}
		return m
	}
	tests := []struct {
		name   string
		cfg    HTTPConfig
		modify func(*Message)
		want   map[string][]string
	}{
		{"defaults", HTTPConfig{}, func(*Message) {}, all},
		{"ce type", HTTPConfig{CEType: "com.example.order.v1"}, func(*Message) {},
			with(HeaderCEType, []string{"com.example.order.v1"})},
		{"null key", HTTPConfig{}, func(m *Message) { m.Key = nil },
			with(HeaderCEKafkaKey, nil)},
		{"empty key", HTTPConfig{}, func(m *Message) { m.Key = []byte{} },
			with(HeaderCEKafkaKey, []string{""})},
		{"binary key", HTTPConfig{}, func(m *Message) { m.Key = []byte{0x00, 0xff, 0xfb} },
			with(HeaderCEKafkaKey, []string{"AP/7"})},
		{"tombstone", HTTPConfig{}, func(m *Message) { m.Value = nil },
			with(HeaderTombstone, []string{"true"})},
		{"empty value", HTTPConfig{}, func(m *Message) { m.Value = []byte{} }, all},
		{"zero timestamp", HTTPConfig{}, func(m *Message) { m.Timestamp = time.Time{} },
			with(HeaderCETime, nil)},
		{"content type from record header", HTTPConfig{}, func(m *Message) {
			m.Headers = []kgo.RecordHeader{{Key: "Content-Type", Value: []byte("application/json")}}
		}, with(
			HeaderContentType, []string{"application/json"},
			HeaderKafkaHeader, []string{"Q29udGVudC1UeXBl:YXBwbGljYXRpb24vanNvbg=="},
		)},
		{"id from coordinates when unset", HTTPConfig{}, func(m *Message) { m.ID = "" }, all},
		{"large coordinates", HTTPConfig{}, func(m *Message) {
			m.ID, m.Partition, m.Offset, m.Attempt = "orders/2147483647/9223372036854775807", 1<<31-1, 1<<63-1, 1
		}, with(
			HeaderCEID, []string{"orders/2147483647/9223372036854775807"},
			HeaderCEKafkaPartition, []string{"2147483647"},
			HeaderCEKafkaOffset, []string{"9223372036854775807"},
			HeaderCEAttempt, []string{"1"},
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.modify(m)
			got := capture(t, tt.cfg, m)
			if got.method != http.MethodPost {
				t.Errorf("method %s, want POST", got.method)
			}
			for name, want := range tt.want {
				if vs := got.header.Values(name); !reflect.DeepEqual(vs, want) {
					t.Errorf("%s: %q, want %q", name, vs, want)
				}
			}
			if !bytes.Equal(got.body, m.Value) {
				t.Errorf("body %q, want %q", got.body, m.Value)
			}
			if got.err != nil {
				t.Fatalf("MessageFromRequest: %v", got.err)
			}
			if (got.msg.Key == nil) != (m.Key == nil) || (got.msg.Value == nil) != (m.Value == nil) {
				t.Errorf("null-ness lost: key nil %v→%v, value nil %v→%v",
					m.Key == nil, got.msg.Key == nil, m.Value == nil, got.msg.Value == nil)
			}
		})
	}
}

func TestHTTPDeliverRoundTrip(t *testing.T) {
	value := make([]byte, 256)
	for i := range value {
		value[i] = byte(i)
	}
	value = append(value, 0xc3, 0x28, 0xed, 0xa0, 0x80) // invalid UTF-8
	want := &Message{
		ID: "orders/0/7", Topic: "orders", Partition: 0, Offset: 7,
		Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC),
		Key:       []byte{0x00, 0xff, ':', ','},
		Value:     value,
		Headers: []kgo.RecordHeader{
			{Key: "trace", Value: []byte("1")},
			{Key: "\x00\xff", Value: []byte{0x00, 0xff, 0xfe}},
			{Key: "trace", Value: []byte("2")}, // duplicate key, order kept
			{Key: "bad\xc3\x28utf8", Value: []byte{0xc3, 0x28}},
			{Key: "empty", Value: []byte{}},
			{Key: "null", Value: nil},
			{Key: "", Value: []byte{}},
			{Key: "", Value: nil},
			{Key: "a:b,c", Value: []byte(" x:y, z ")},
			{Key: "trace", Value: []byte("3")},
		},
		Attempt: 2,
	}
	got := capture(t, HTTPConfig{}, want)
	if !bytes.Equal(got.body, value) {
		t.Errorf("body differs:\n got %x\nwant %x", got.body, value)
	}
	if got.err != nil {
		t.Fatalf("MessageFromRequest: %v", got.err)
	}
	if !reflect.DeepEqual(got.msg, want) {
		t.Errorf("round trip:\n got %#v\nwant %#v", got.msg, want)
	}
	for i, h := range got.msg.Headers { // DeepEqual treats nil and empty alike
		if (h.Value == nil) != (want.Headers[i].Value == nil) {
			t.Errorf("header %d %q: value nil %v, want %v", i, h.Key, h.Value == nil, want.Headers[i].Value == nil)
		}
	}
	if got.msg.Key == nil {
		t.Error("key became nil")
	}
}

func TestHTTPDeliverTombstoneRoundTrip(t *testing.T) {
	for _, value := range [][]byte{nil, {}} {
		m := &Message{ID: "t/0/1", Topic: "t", Offset: 1, Attempt: 1, Value: value}
		got := capture(t, HTTPConfig{}, m)
		if got.err != nil {
			t.Fatalf("MessageFromRequest: %v", got.err)
		}
		if len(got.body) != 0 {
			t.Errorf("value nil %v: body %q, want empty", value == nil, got.body)
		}
		if (got.msg.Value == nil) != (value == nil) {
			t.Errorf("value nil %v: decoded nil %v", value == nil, got.msg.Value == nil)
		}
	}
}

func TestContentType(t *testing.T) {
	tests := []struct {
		headers []kgo.RecordHeader
		want    string
	}{
		{nil, DefaultContentType},
		{[]kgo.RecordHeader{{Key: "other", Value: []byte("x")}}, DefaultContentType},
		{[]kgo.RecordHeader{{Key: "content-type", Value: []byte("text/plain; charset=utf-8")}}, "text/plain; charset=utf-8"},
		{[]kgo.RecordHeader{{Key: "CONTENT-TYPE", Value: []byte("application/json")}}, "application/json"},
		{[]kgo.RecordHeader{
			{Key: "content-type", Value: []byte("application/json")},
			{Key: "content-type", Value: []byte("text/plain")},
		}, "application/json"},
		{[]kgo.RecordHeader{{Key: "content-type", Value: []byte("text/plain\r\nX-Evil: 1")}}, DefaultContentType},
		{[]kgo.RecordHeader{{Key: "content-type", Value: []byte{0}}}, DefaultContentType},
		{[]kgo.RecordHeader{{Key: "content-type", Value: nil}}, DefaultContentType},
		{[]kgo.RecordHeader{{Key: "content-type", Value: []byte("  ")}}, DefaultContentType},
	}
	for _, tt := range tests {
		if got := contentType(tt.headers); got != tt.want {
			t.Errorf("contentType(%q) = %q, want %q", tt.headers, got, tt.want)
		}
	}
}

func TestHTTPDeliverStatus(t *testing.T) {
	inAbout := func(d time.Duration) string {
		return time.Now().Add(d).UTC().Format(http.TimeFormat)
	}
	tests := []struct {
		name       string
		status     int
		header     map[string]string
		body       string
		want       *StatusError // nil: Deliver returns nil
		retryAfter [2]time.Duration
		class      Class
		unlisted   bool
	}{
		{name: "200", status: 200, body: "ok"},
		{name: "202", status: 202},
		{name: "204", status: 204},
		{name: "503 delta seconds", status: 503, header: map[string]string{"Retry-After": "7"}, body: "busy",
			want: &StatusError{Status: 503, RetryAfter: 7 * time.Second, Body: "busy"}, class: ClassTransient},
		{name: "429 http date", status: 429, header: map[string]string{"Retry-After": inAbout(30 * time.Second)},
			want: &StatusError{Status: 429}, retryAfter: [2]time.Duration{28 * time.Second, 30 * time.Second}, class: ClassTransient},
		{name: "503 date in the past", status: 503, header: map[string]string{"Retry-After": inAbout(-time.Hour)},
			want: &StatusError{Status: 503}, class: ClassTransient},
		{name: "503 garbage retry after", status: 503, header: map[string]string{"Retry-After": "soon"},
			want: &StatusError{Status: 503}, class: ClassTransient},
		{name: "422", status: 422, body: `{"error":"sku unknown"}`,
			want: &StatusError{Status: 422, Body: `{"error":"sku unknown"}`}, class: ClassPermanent},
		{name: "500 no body", status: 500, want: &StatusError{Status: 500}, class: ClassTransient},
		{name: "418 unlisted", status: 418, body: "teapot",
			want: &StatusError{Status: 418, Body: "teapot"}, class: ClassTransient, unlisted: true},
		{name: "302 not followed", status: 302, header: map[string]string{"Location": "/elsewhere"},
			want: &StatusError{Status: 302}, class: ClassTransient, unlisted: true},
		{name: "301 not followed", status: 301, header: map[string]string{"Location": "/elsewhere"}, body: "moved",
			want: &StatusError{Status: 301, Body: "moved"}, class: ClassTransient, unlisted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var elsewhere atomic.Int32
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/elsewhere" {
					elsewhere.Add(1)
					return
				}
				for k, v := range tt.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			h := newHTTP(t, HTTPConfig{URL: srv.URL})
			err := h.Deliver(t.Context(), &Message{ID: "t/0/0", Topic: "t", Attempt: 1, Value: []byte("v")})
			if n := elsewhere.Load(); n != 0 {
				t.Errorf("redirect followed %d times", n)
			}
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Deliver: %v, want nil", err)
				}
				return
			}
			var se *StatusError
			if !errors.As(err, &se) {
				t.Fatalf("Deliver: %v (%T), want *StatusError", err, err)
			}
			if tt.retryAfter[1] > 0 {
				if se.RetryAfter < tt.retryAfter[0] || se.RetryAfter > tt.retryAfter[1] {
					t.Errorf("RetryAfter %v, want in [%v, %v]", se.RetryAfter, tt.retryAfter[0], tt.retryAfter[1])
				}
				se.RetryAfter = 0
			}
			if *se != *tt.want {
				t.Errorf("StatusError %+v, want %+v", *se, *tt.want)
			}
			v := Classify(err, DefaultStatuses)
			if v.Class != tt.class || v.Unlisted != tt.unlisted || v.Status != tt.status {
				t.Errorf("Classify = %+v, want class %s, unlisted %v, status %d", v, tt.class, tt.unlisted, tt.status)
			}
		})
	}
}

func TestHTTPDeliverTimeout(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done(): // the client gave up and closed the connection
		case <-time.After(10 * time.Second):
		}
	})
	h := newHTTP(t, HTTPConfig{URL: srv.URL, Timeout: 100 * time.Millisecond})
	start := time.Now()
	err := h.Deliver(t.Context(), &Message{ID: "t/0/0", Topic: "t", Attempt: 1})
	if el := time.Since(start); el < 100*time.Millisecond || el > 5*time.Second {
		t.Errorf("Deliver returned after %v, want about 100ms", el)
	}
	t.Logf("timeout: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Deliver: %v, want context.DeadlineExceeded", err)
	}
	if v := Classify(err, DefaultStatuses); v.Class != ClassTransient || v.Unlisted || v.Status != 0 {
		t.Errorf("Classify = %+v, want listed transient without status", v)
	}
}

// TestHTTPDeliverTimeoutInBody: the timeout also bounds reading the answer.
func TestHTTPDeliverTimeoutInBody(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	h := newHTTP(t, HTTPConfig{URL: srv.URL, Timeout: 100 * time.Millisecond})
	start := time.Now()
	_ = h.Deliver(t.Context(), &Message{ID: "t/0/0", Topic: "t", Attempt: 1})
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("Deliver returned after %v, want about 100ms", el)
	}
}

// TestHTTPDeliver101: net/http hands back a 101 with the raw connection as
// its body; Deliver must not read it past the timeout.
func TestHTTPDeliver101(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		c, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
		bw.Flush()
		<-release // hold the connection open
	})
	defer close(release)
	h := newHTTP(t, HTTPConfig{URL: srv.URL, Timeout: 5 * time.Second})
	start := time.Now()
	err := h.Deliver(t.Context(), &Message{ID: "t/0/0", Topic: "t", Attempt: 1})
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Deliver returned after %v, want at once", el)
	}
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusSwitchingProtocols {
		t.Fatalf("Deliver: %v, want a 101 StatusError", err)
	}
	if v := Classify(err, DefaultStatuses); v.Class != ClassTransient || !v.Unlisted {
		t.Errorf("Classify = %+v, want transient, unlisted", v)
	}
}

func TestHTTPDeliverRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h := newHTTP(t, HTTPConfig{URL: "http://" + addr + "/records"})
	err = h.Deliver(t.Context(), &Message{ID: "t/0/0", Topic: "t", Attempt: 1})
	t.Logf("refused: %v", err)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Deliver: %v, want ECONNREFUSED", err)
	}
	if v := Classify(err, DefaultStatuses); v.Class != ClassTransient || v.Unlisted {
		t.Errorf("Classify = %+v, want listed transient", v)
	}
}

// TestHTTPDeliverClosedBeforeAnswer: an app that closes the connection
// without answering is a connection error, named as one, not net/http's
// bare "EOF" classified as an unlisted error.
func TestHTTPDeliverClosedBeforeAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	h := newHTTP(t, HTTPConfig{URL: srv.URL + "/records"})
	err := h.Deliver(t.Context(), &Message{ID: "t/0/0", Topic: "t", Attempt: 1})
	t.Logf("closed: %v", err)
	if !errors.Is(err, ErrClosedBeforeAnswer) || !strings.Contains(err.Error(), "the app closed the connection before answering") {
		t.Fatalf("Deliver: %v, want ErrClosedBeforeAnswer", err)
	}
	v := Classify(err, DefaultStatuses)
	if v.Class != ClassTransient || v.Unlisted || ErrorType(err, v) != "connection" {
		t.Errorf("Classify = %+v, error type %q, want listed transient of type connection", v, ErrorType(err, v))
	}
}

// countConns starts a server that counts the connections opened to it.
func countConns(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestHTTPConnectionReuse(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   int // bytes
	}{
		{"204", http.StatusNoContent, 0},
		{"200 with body", http.StatusOK, 10 << 10},
		{"503 with body under the drain bound", http.StatusServiceUnavailable, 32 << 10},
		{"422", http.StatusUnprocessableEntity, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, conns := countConns(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				w.Write(bytes.Repeat([]byte{'x'}, tt.body))
			})
			h := newHTTP(t, HTTPConfig{URL: srv.URL})
			for i := range 50 {
				err := h.Deliver(t.Context(), &Message{ID: "t/0/" + strconv.Itoa(i), Topic: "t", Offset: int64(i), Attempt: 1, Value: []byte("v")})
				if (err == nil) != (tt.status < 300) {
					t.Fatalf("delivery %d: %v", i, err)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("%d connections for 50 sequential deliveries, want 1", n)
			}
		})
	}
}

func TestHTTPMaxInFlight(t *testing.T) {
	var active, peak atomic.Int32
	srv, conns := countConns(t, func(w http.ResponseWriter, r *http.Request) {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	})
	h := newHTTP(t, HTTPConfig{URL: srv.URL, MaxInFlight: 2})
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			if err := h.Deliver(t.Context(), &Message{ID: "t/0/" + strconv.Itoa(i), Topic: "t", Attempt: 1}); err != nil {
				t.Errorf("Deliver: %v", err)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 2 {
		t.Errorf("%d concurrent requests, want at most 2", p)
	}
	if n := conns.Load(); n > 2 {
		t.Errorf("%d connections, want at most 2", n)
	}
}

// countingTransport counts the response body bytes the client reads.
type countingTransport struct {
	base http.RoundTripper
	read atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func TestHTTPErrorBodyBounded(t *testing.T) {
	const size = 10 << 20
	chunk := bytes.Repeat([]byte("é"), 512) // 1 KiB of 2-byte runes
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.WriteHeader(http.StatusBadGateway)
		for written := 0; written < size; written += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return // the client closed the connection
			}
		}
	})
	h := newHTTP(t, HTTPConfig{URL: srv.URL})
	ct := &countingTransport{base: h.client.Transport}
	h.client.Transport = ct
	err := h.Deliver(t.Context(), &Message{ID: "t/0/0", Topic: "t", Attempt: 1})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusBadGateway {
		t.Fatalf("Deliver: %v, want 502 StatusError", err)
	}
	if want := strings.Repeat("é", MaxErrorBody/2); se.Body != want {
		t.Errorf("Body: %d bytes, want the first %d", len(se.Body), MaxErrorBody)
	}
	if n := ct.read.Load(); n > MaxErrorBody+maxDrain {
		t.Errorf("read %d bytes of the body, want at most %d", n, MaxErrorBody+maxDrain)
	}
}

func TestReadErrorBody(t *testing.T) {
	a := strings.Repeat("a", MaxErrorBody)
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"text", "out of stock\n", "out of stock\n"},
		{"control characters kept", "a\x00b\x1b[31mc\x7f", "a\x00b\x1b[31mc\x7f"},
		{"invalid UTF-8 replaced", "a\xffb\xc3\x28", "a\uFFFDb\uFFFD("},
		{"cut at the bound", a + "rest", a},
		{"rune cut by the bound dropped", a[1:] + "é", a[1:]},
		{"4-byte rune cut by the bound dropped", a[2:] + "😀", a[2:]},
		{"rune ending at the bound kept", a[2:] + "é" + "rest", a[2:] + "é"},
		{"replacements do not grow it past the bound", strings.Repeat("a\xff", MaxErrorBody), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := readErrorBody(strings.NewReader(tt.in))
			if len(got) > MaxErrorBody || !utf8.ValidString(got) {
				t.Fatalf("%d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("got %q (%d bytes), want %q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 19, 0, 0, 0, time.UTC)
	date := func(d time.Duration, layout string) string { return now.Add(d).Format(layout) }
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"7", 7 * time.Second},
		{" 7\t", 7 * time.Second},
		{"007", 7 * time.Second},
		{"86400", 24 * time.Hour},
		{"86401", MaxRetryAfter},
		{"9223372036", MaxRetryAfter},                 // overflows time.Duration in ns
		{"99999999999999999999999999", MaxRetryAfter}, // overflows uint64
		{"-1", 0},
		{"+5", 0},
		{"1.5", 0},
		{"7s", 0},
		{"soon", 0},
		{date(30*time.Second, http.TimeFormat), 30 * time.Second},
		{date(-time.Hour, http.TimeFormat), 0},
		{date(0, http.TimeFormat), 0},
		{date(48*time.Hour, http.TimeFormat), MaxRetryAfter},
		{"Fri, 31 Dec 9999 23:59:59 GMT", MaxRetryAfter},
		{date(time.Minute, time.RFC850), time.Minute}, // obsolete forms, RFC 9110 §5.6.7
		{date(time.Minute, time.ANSIC), time.Minute},
		{"Sun, 29 Nov 2026 19:00:30", 0}, // no zone: not an HTTP-date
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.in, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestNewHTTP(t *testing.T) {
	bad := []struct {
		cfg  HTTPConfig
		want string
	}{
		{HTTPConfig{URL: ""}, `app url ""`},
		{HTTPConfig{URL: "localhost:8080"}, `app url "localhost:8080"`},
		{HTTPConfig{URL: "ftp://app/records"}, `app url "ftp://app/records"`},
		{HTTPConfig{URL: "http://"}, `app url "http://"`},
		{HTTPConfig{URL: "http://app:port"}, `app url "http://app:port"`},
		{HTTPConfig{URL: "http://app", Timeout: -time.Second}, `app timeout "-1s"`},
		{HTTPConfig{URL: "http://app", MaxInFlight: -1}, "app max_in_flight -1"},
		{HTTPConfig{URL: "http://app", CEType: "a\r\nb"}, `ce type "a\r\nb"`},
	}
	for _, tt := range bad {
		if _, err := NewHTTP(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewHTTP(%+v) = %v, want an error containing %s", tt.cfg, err, tt.want)
		}
	}

	t.Setenv("HTTP_PROXY", "http://proxy.invalid:3128")
	h := newHTTP(t, HTTPConfig{URL: "http://127.0.0.1:8080/records"})
	if h.timeout != DefaultHTTPTimeout || h.ceType != DefaultCEType {
		t.Errorf("defaults: timeout %v, ce type %q", h.timeout, h.ceType)
	}
	tr := h.transport
	if tr.MaxConnsPerHost != DefaultMaxInFlight || tr.MaxIdleConnsPerHost != DefaultMaxInFlight || tr.DisableKeepAlives {
		t.Errorf("transport: MaxConnsPerHost %d, MaxIdleConnsPerHost %d, DisableKeepAlives %v",
			tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost, tr.DisableKeepAlives)
	}
	if tr.Proxy != nil {
		t.Error("transport uses a proxy")
	}
	h = newHTTP(t, HTTPConfig{URL: "https://app.local/records", Timeout: time.Second, MaxInFlight: 3, CEType: "x"})
	if h.timeout != time.Second || h.ceType != "x" || h.transport.MaxConnsPerHost != 3 || h.transport.MaxIdleConnsPerHost != 3 {
		t.Errorf("config not applied: %+v", h)
	}
}

// validRequest returns a request that MessageFromRequest accepts.
func validRequest(body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/records", strings.NewReader(body))
	for k, v := range map[string]string{
		HeaderCESpecVersion:    "1.0",
		HeaderCEID:             "orders/1/2",
		HeaderCESource:         "kafka:///orders",
		HeaderCEType:           "kafka.record",
		HeaderCETime:           "2026-01-02T03:04:05.678Z",
		HeaderCEKafkaTopic:     "orders",
		HeaderCEKafkaPartition: "1",
		HeaderCEKafkaOffset:    "2",
		HeaderCEKafkaKey:       "azE=",
		HeaderCEAttempt:        "1",
	} {
		r.Header.Set(k, v)
	}
	r.Header.Add(HeaderKafkaHeader, "YQ==:MQ==")
	return r
}

func TestMessageFromRequest(t *testing.T) {
	m, err := MessageFromRequest(validRequest("v"))
	if err != nil {
		t.Fatal(err)
	}
	want := &Message{
		ID: "orders/1/2", Topic: "orders", Partition: 1, Offset: 2,
		Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 678_000_000, time.UTC),
		Key:       []byte("k1"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}},
		Attempt: 1,
	}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("got %#v\nwant %#v", m, want)
	}
}

func TestMessageFromRequestRejects(t *testing.T) {
	set := func(name, v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set(name, v) } }
	add := func(name, v string) func(*http.Request) { return func(r *http.Request) { r.Header.Add(name, v) } }
	del := func(name string) func(*http.Request) { return func(r *http.Request) { r.Header.Del(name) } }
	tests := []struct {
		name   string
		body   string
		modify func(*http.Request)
		want   string // in the error message
	}{
		{"no specversion", "", del(HeaderCESpecVersion), "header ce-specversion missing"},
		{"specversion 0.3", "", set(HeaderCESpecVersion, "0.3"), `header ce-specversion: "0.3" is not 1.0`},
		{"no id", "", del(HeaderCEID), "header ce-id missing"},
		{"empty id", "", set(HeaderCEID, ""), `header ce-id: "" is not a non-empty id`},
		{"two ids", "", add(HeaderCEID, "orders/1/3"), "header ce-id: 2 values"},
		{"no topic", "", del(HeaderCEKafkaTopic), "header ce-kafkatopic missing"},
		{"no partition", "", del(HeaderCEKafkaPartition), "header ce-kafkapartition missing"},
		{"partition not a number", "", set(HeaderCEKafkaPartition, "x"), `header ce-kafkapartition: "x" is not a partition`},
		{"partition negative", "", set(HeaderCEKafkaPartition, "-1"), `header ce-kafkapartition: "-1"`},
		{"partition overflow", "", set(HeaderCEKafkaPartition, "2147483648"), `header ce-kafkapartition: "2147483648"`},
		{"offset not a number", "", set(HeaderCEKafkaOffset, "1e3"), `header ce-kafkaoffset: "1e3" is not an offset`},
		{"no attempt", "", del(HeaderCEAttempt), "header ce-attempt missing"},
		{"attempt 0", "", set(HeaderCEAttempt, "0"), `header ce-attempt: "0" is not an attempt`},
		{"bad time", "", set(HeaderCETime, "yesterday"), `header ce-time: "yesterday" is not an RFC 3339 time`},
		{"key not base64", "", set(HeaderCEKafkaKey, "k1"), `header ce-kafkakey: "k1" is not standard padded base64`},
		{"key url-safe base64", "", set(HeaderCEKafkaKey, "AP_7"), `header ce-kafkakey: "AP_7"`},
		{"key unpadded", "", set(HeaderCEKafkaKey, "azE"), `header ce-kafkakey: "azE"`},
		{"tombstone yes", "", set(HeaderTombstone, "yes"), `header kretry-tombstone: "yes" is not true`},
		{"tombstone with a body", "v", set(HeaderTombstone, "true"), "kretry-tombstone: true but the body has 1 bytes"},
		{"kafka header key not base64", "", add(HeaderKafkaHeader, "a!:MQ=="), `kretry-kafka-header[1] "a!:MQ==": key`},
		{"kafka header value not base64", "", add(HeaderKafkaHeader, "YQ==:1"), `kretry-kafka-header[1] "YQ==:1": value`},
		{"kafka header two colons", "", add(HeaderKafkaHeader, "YQ==:MQ==:MQ=="), `kretry-kafka-header[1] "YQ==:MQ==:MQ==": value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest(tt.body)
			tt.modify(r)
			_, err := MessageFromRequest(r)
			if !errors.Is(err, ErrMalformedRequest) {
				t.Fatalf("err %v, want ErrMalformedRequest", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestDecodeKafkaHeaders(t *testing.T) {
	h := http.Header{}
	h.Add(HeaderKafkaHeader, "YQ==:MQ==, YQ==:Mg==,\tYg==") // folded by a proxy
	h.Add(HeaderKafkaHeader, ":")
	h.Add(HeaderKafkaHeader, "")
	got, err := DecodeKafkaHeaders(h)
	if err != nil {
		t.Fatal(err)
	}
	want := []kgo.RecordHeader{
		{Key: "a", Value: []byte("1")},
		{Key: "a", Value: []byte("2")},
		{Key: "b", Value: nil},
		{Key: "", Value: []byte{}},
		{Key: "", Value: nil},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got[2].Value != nil || got[3].Value == nil || got[4].Value != nil {
		t.Error("null and empty values not kept apart")
	}
	if got, err := DecodeKafkaHeaders(http.Header{}); got != nil || err != nil {
		t.Errorf("no headers: %q, %v; want nil, nil", got, err)
	}
}

func BenchmarkHTTPDeliver(b *testing.B) {
	srv := newServer(b, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	})
	m := &Message{
		ID: "orders/3/123456", Topic: "orders", Partition: 3, Offset: 123456,
		Timestamp: time.Now(),
		Key:       []byte("customer-42"),
		Value:     bytes.Repeat([]byte("x"), 1<<10),
		Headers: []kgo.RecordHeader{
			{Key: "content-type", Value: []byte("application/json")},
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
		},
		Attempt: 1,
	}
	b.Run("serial", func(b *testing.B) {
		h := newHTTP(b, HTTPConfig{URL: srv.URL})
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			if err := h.Deliver(b.Context(), m); err != nil {
				b.Fatal(err)
			}
			n++
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("parallel", func(b *testing.B) {
		h := newHTTP(b, HTTPConfig{URL: srv.URL, MaxInFlight: 64})
		b.ReportAllocs()
		b.SetParallelism(8) // 8×GOMAXPROCS goroutines, bounded by MaxInFlight connections
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := h.Deliver(context.Background(), m); err != nil {
					b.Error(err)
					return
				}
				n.Add(1)
			}
		})
		b.ReportMetric(float64(n.Load())/b.Elapsed().Seconds(), "records/s")
	})
}
