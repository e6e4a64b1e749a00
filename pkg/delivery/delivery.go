// Package delivery hands one Kafka record to the application and classifies
// the answer. A Deliverer is either HTTP (CloudEvents 1.0 binary mode, see
// HTTP) or an in-process Go handler (HandlerFunc); both see the same Message,
// the same attempt numbers and the same classification (Classify).
package delivery

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Message is one record as the application sees it. Topic, Partition, Offset
// and Timestamp are those of the ORIGINAL record on the source topic, also
// when the record is delivered from a retry tier, so ID is stable across
// retries and serves as the idempotency key.
type Message struct {
	// ID is "<topic>/<partition>/<offset>" of the original record.
	ID        string
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	// Key is nil for a null key; Value is nil for a tombstone.
	Key   []byte
	Value []byte
	// Headers are the original record headers, in order, duplicates kept.
	Headers []kgo.RecordHeader
	// Attempt is 1 on the first delivery, 2 on the first retry, …
	Attempt int
	// GapAfter is the ID of a record of the same key that was dead-lettered
	// while this one was parked behind it (ordering: key with
	// on_dead_letter: release); "" otherwise.
	GapAfter string
}

// Deliverer delivers one message. A nil error means the application is done
// with it; any other error is classified by Classify.
//
// With tracing on (TraceDeliveries, which `kretry run` and
// sidecar.Run apply when tracing.enabled), ctx carries the delivery
// attempt's span: HTTP sends its traceparent, and a Go handler can start
// child spans from ctx. With tracing off it carries no span; the
// producer's context is then in m.Headers (RecordTraceContext reads it).
type Deliverer interface {
	Deliver(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to the Deliverer interface, for Go programs
// that embed the engine instead of serving HTTP.
type HandlerFunc func(ctx context.Context, m *Message) error

// Deliver calls f(ctx, m).
func (f HandlerFunc) Deliver(ctx context.Context, m *Message) error { return f(ctx, m) }
