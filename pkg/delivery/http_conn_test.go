package delivery

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

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
