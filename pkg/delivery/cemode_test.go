package delivery

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestContentTypeNotAnEventFormat: a record whose content-type is a
// CloudEvents event format is delivered as application/octet-stream, or
// the CloudEvents SDKs would read the request as structured (or batched)
// mode and drop kretry's ce-* attributes (e2e TestCloudEventsSDK).
func TestContentTypeNotAnEventFormat(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"application/cloudevents+json", DefaultContentType},
		{"application/cloudevents+json; charset=UTF-8", DefaultContentType},
		{"Application/CloudEvents+JSON", DefaultContentType},
		{"application/cloudevents", DefaultContentType},
		{"application/cloudevents+avro", DefaultContentType},
		{"application/cloudevents-batch+json", DefaultContentType},
		{"application/cloudevents+json;;", DefaultContentType}, // unparsable parameters
		{"application/json", "application/json"},
		{"application/cloudeventsx", "application/cloudeventsx"},
		{"text/plain; charset=utf-8", "text/plain; charset=utf-8"},
	} {
		got := contentType([]kgo.RecordHeader{{Key: "content-type", Value: []byte(tc.in)}})
		if got != tc.want {
			t.Errorf("contentType(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
