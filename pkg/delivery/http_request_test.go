package delivery

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

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
