package dlq_test

import (
	"testing"

	"github.com/kretry/kretry/dlq"
)

// The API and the page show text only where `kretry dlq show` does: valid
// UTF-8 with control characters is binary (base64), as docs/DLQ.md says.
func TestTextOrBase64(t *testing.T) {
	tests := []struct {
		name      string
		in        []byte
		text, b64 string // "" for absent
	}{
		{"text", []byte("order-7"), "order-7", ""},
		{"lines and tabs are text", []byte("a\tb\r\nc"), "a\tb\r\nc", ""},
		{"control characters are binary", []byte("\x00\x01binary"), "", "AAFiaW5hcnk="},
		{"DEL is binary", []byte("a\x7f"), "", "YX8="},
		{"escape sequence is binary", []byte("\x1b[31mred"), "", "G1szMW1yZWQ="},
		{"invalid UTF-8 is binary", []byte{0xff, 0}, "", "/wA="},
		{"empty is text", []byte{}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text, b64 := dlq.TextOrBase64(tt.in)
			if deref(text) != tt.text || deref(b64) != tt.b64 || (text == nil) == (b64 == nil) {
				t.Errorf("TextOrBase64(%q) = text %q, b64 %q; want text %q, b64 %q (exactly one set)", tt.in, deref(text), deref(b64), tt.text, tt.b64)
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
