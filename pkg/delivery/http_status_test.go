package delivery

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

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
