package delivery

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

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
