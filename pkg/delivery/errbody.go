package delivery

import (
	"mime"
	"strings"

	"golang.org/x/net/html"
)

// errorMessage makes the start of an error response body (see
// readErrorBody) into StatusError.Body, the error message: whitespace runs
// become one space, and an HTML page (Content-Type text/html, or a body
// starting with <!DOCTYPE or <html) gives its <title>, or its first text
// when it has no title, instead of its markup. A breaker log line, a
// failure fingerprint and the DLQ's error header then read "status 503:
// Service Unavailable", not "<!DOCTYPE HTML> <html lang=…".
func errorMessage(body, contentType string) string {
	if isHTML(body, contentType) {
		body = htmlText(body)
	}
	return strings.Join(strings.Fields(body), " ")
}

func isHTML(body, contentType string) bool {
	if mt, _, err := mime.ParseMediaType(contentType); err == nil && (mt == "text/html" || mt == "application/xhtml+xml") {
		return true
	}
	start := strings.TrimLeft(body, " \t\r\n\ufeff")
	start = strings.ToLower(start[:min(len(start), len("<!doctype"))])
	return strings.HasPrefix(start, "<!doctype") || strings.HasPrefix(start, "<html")
}

// htmlText is the text of the page's <title>, or else its first text
// outside <head>, <script> and <style>; "" when it has neither.
func htmlText(page string) string {
	z := html.NewTokenizer(strings.NewReader(page))
	var first string
	skip := 0 // depth inside elements whose text is not the page's message
	inTitle := false
	for {
		switch z.Next() {
		case html.ErrorToken: // io.EOF: the end of the (possibly cut) page
			return first
		case html.StartTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "title":
				inTitle = true
			case "head", "script", "style", "noscript", "template":
				skip++
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "title":
				inTitle = false
			case "head", "script", "style", "noscript", "template":
				skip = max(skip-1, 0)
			}
		case html.TextToken:
			text := strings.TrimSpace(string(z.Text()))
			switch {
			case text == "":
			case inTitle:
				return text
			case skip == 0 && first == "":
				first = text
			}
		}
	}
}
