package delivery

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

// An apache-like error page, as a proxy in front of an app answers.
const apachePage = `<!DOCTYPE HTML PUBLIC "-//IETF//DTD HTML 2.0//EN">
<html lang="en">
<head>
  <style>body { color: red }</style>
  <title>503 Service
     Unavailable</title>
</head>
<body>
<h1>Service Unavailable</h1>
<p>The server is temporarily unable to service your
request due to maintenance downtime or capacity problems.</p>
</body></html>
`

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		name, body, contentType, want string
	}{
		{"text kept", "out of stock", "text/plain", "out of stock"},
		{"whitespace collapsed", "  out of\n\tstock \r\n", "", "out of stock"},
		{"control characters kept", "a\x00b", "", "a\x00b"},
		{"html page by its doctype: the title", apachePage, "", "503 Service Unavailable"},
		{"html by content type: the title, entities decoded", "<title>Fish &amp; chips</title>", "text/html; charset=utf-8", "Fish & chips"},
		{"html without a title: the first text", "<html><head><script>var x = 1</script></head><body>\n<h1> Bad  Gateway </h1><p>nginx</p>", "", "Bad Gateway"},
		{"html page cut by the bound", "<!doctype html><html><body><p>upstream timed out, retr", "", "upstream timed out, retr"},
		{"text/html that is plain text", "busy", "text/html", "busy"},
		{"html without any text", "<html><body><br></body></html>", "", ""},
		{"markup in a text body is kept", "<b>bold</b> claim", "text/plain", "<b>bold</b> claim"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errorMessage(tt.body, tt.contentType); got != tt.want {
				t.Errorf("errorMessage(%q, %q) = %q, want %q", tt.body, tt.contentType, got, tt.want)
			}
		})
	}
}

// The error of an app answering an HTML error page carries the page's
// title, not its markup.
func TestHTTPErrorFromHTMLPage(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(apachePage))
	})
	err := newHTTP(t, HTTPConfig{URL: srv.URL}).Deliver(t.Context(), &Message{ID: "t/0/0", Topic: "t", Attempt: 1})
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable {
		t.Fatalf("Deliver: %v, want a 503 StatusError", err)
	}
	if got, want := err.Error(), "status 503: 503 Service Unavailable"; !strings.Contains(got, want) || strings.Contains(got, "<") {
		t.Fatalf("error %q, want it to hold %q and no markup", got, want)
	}
}
