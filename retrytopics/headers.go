package retrytopics

// Header names on retry-tier and DLQ records (DESIGN.md, "Headers on retry
// and DLQ records"). kretry writes all of them, in this order, before the
// original headers on every move, and strips exactly this leading run when
// it moves a record again, so error headers are replaced per hop and the
// original headers follow byte for byte. Times are RFC 3339 UTC with
// milliseconds (TimeFormat).
const (
	HeaderAttempt           = "kretry-attempt"            // deliveries made so far (decimal)
	HeaderStage             = "kretry-stage"              // topic the record sits on now: a tier topic or the DLQ
	HeaderDueTime           = "kretry-due-time"           // when a tier may deliver it; empty on the DLQ
	HeaderOriginalTopic     = "kretry-original-topic"     // source topic
	HeaderOriginalPartition = "kretry-original-partition" // source partition (decimal)
	HeaderOriginalOffset    = "kretry-original-offset"    // source offset (decimal)
	HeaderOriginalTimestamp = "kretry-original-timestamp" // source record timestamp
	HeaderFirstFailureTime  = "kretry-first-failure-time" // sidecar clock at the first failure
	HeaderLastFailureTime   = "kretry-last-failure-time"  // sidecar clock at this failure
	HeaderErrorClass        = "kretry-error-class"        // transient | permanent | exhausted
	HeaderErrorStatus       = "kretry-error-status"       // HTTP status (decimal), empty when none
	HeaderErrorMessage      = "kretry-error-message"      // error text, truncated to fit
	HeaderGroup             = "kretry-group"              // consumer group that moved it
	HeaderVersion           = "kretry-version"            // kretry version that moved it
)

// Headers lists the kretry header names in the order they are written.
var Headers = [...]string{
	HeaderAttempt, HeaderStage, HeaderDueTime,
	HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset, HeaderOriginalTimestamp,
	HeaderFirstFailureTime, HeaderLastFailureTime,
	HeaderErrorClass, HeaderErrorStatus, HeaderErrorMessage,
	HeaderGroup, HeaderVersion,
}

// TimeFormat is RFC 3339 UTC with milliseconds.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"
