package dlq

import (
	_ "embed"
	"net/http"
)

// page is the web page: plain HTML and JavaScript, no build step. It
// calls the API with the token the user types (kept in sessionStorage).
//
//go:embed web/index.html
var page []byte

func servePage(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The page loads nothing from elsewhere and is never framed.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(page)
}
