package delivery

import (
	"mime"
	"strings"
)

// isCloudEventsFormat reports whether the media type v names a CloudEvents
// event format: application/cloudevents, application/cloudevents+json,
// application/cloudevents-batch+json, … (parameters ignored, any case).
//
// Such a Content-Type cannot carry datacontenttype in binary mode: the
// CloudEvents HTTP protocol binding (v1.0.2, §3.1 and §3.2, "Content
// Modes") has receivers choose structured mode when the Content-Type is an
// event format, and batched mode for application/cloudevents-batch, so the
// CloudEvents SDKs read the body as the whole event and drop the ce-*
// headers. kretry therefore sends DefaultContentType for a record whose
// content-type header is one of these (a producer's structured-mode
// CloudEvent); the original header still travels in kretry-kafka-header.
func isCloudEventsFormat(v string) bool {
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(strings.SplitN(v, ";", 2)[0]))
	}
	return mt == "application/cloudevents" || strings.HasPrefix(mt, "application/cloudevents+") ||
		strings.HasPrefix(mt, "application/cloudevents-batch")
}
