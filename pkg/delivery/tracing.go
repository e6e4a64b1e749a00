package delivery

import (
	"context"
	"strconv"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/kretry/kretry/pkg/flow"
)

// Tracing of deliveries follows the OpenTelemetry semantic conventions
// v1.43.0 for messaging spans (docs/messaging/messaging-spans.md) and Kafka
// (docs/messaging/kafka.md): each delivery attempt is one "process" span of
// kind CONSUMER (a push-based consumer: kretry, not the app, initiates the
// delivery), named "process <topic>".

// TracerName is the instrumentation scope of the delivery spans.
const TracerName = "github.com/kretry/kretry/pkg/delivery"

// Attribute keys of the delivery spans, beside the messaging ones.
const (
	// AttrAttempt is the delivery attempt: 1 on the first delivery, 2 on
	// the first retry, … (ce-attempt).
	AttrAttempt = attribute.Key("kretry.attempt")
	// AttrOutcome is a delivery's outcome: flow.OutcomeOK, or the class of
	// its failure (transient, permanent). The pipeline metrics use it too.
	AttrOutcome = attribute.Key("kretry.outcome")
)

// maxStatusDescription bounds the span status description, in bytes: the
// error text may hold 4 KiB of the app's answer.
const maxStatusDescription = 256

// TraceDeliveries wraps d so that every delivery attempt is a span of tp,
// ended when d.Deliver returns (or panics: the panic goes on):
//
//   - name "process <topic>", kind CONSUMER (messaging conventions v1.43.0:
//     a "process" span of a push-based consumer);
//   - parent: the producer's context that the record carries (its
//     traceparent/tracestate headers, read by the W3C TraceContext
//     propagator), so the delivery joins the producer's trace: every
//     attempt, the first and each retry, is a new child span of the
//     producer's span, in the same trace. The span also links to that
//     context, as the conventions ask of every "process" span. When ctx
//     already carries a span (an embedding program's own), that span
//     stays the parent and the producer's context is the link only (the
//     conventions advise against re-parenting inside another span). A
//     record without trace context starts a new trace per attempt;
//   - attributes: messaging.system kafka, messaging.operation.name and
//     .type process, messaging.destination.name, .partition.id and
//     messaging.kafka.offset of the original record (as in ce-id, so they
//     are the same on every attempt; a retry's tier topic is not among
//     them), messaging.message.id (ce-id), messaging.consumer.group.name
//     group, messaging.kafka.message.key when the key is valid UTF-8
//     without control characters (the conventions leave out a key with no
//     canonical string form), messaging.kafka.message.tombstone on a null
//     value, kretry.attempt, kretry.outcome (ok, transient, permanent, by
//     statuses), and http.response.status_code, which HTTP delivery adds;
//   - on failure: status Error with the error text (at most 256 bytes) and
//     error.type, the same value as on messaging.process.duration: the
//     HTTP status ("503"), "timeout", "connection" or "other".
//
// d receives a ctx that carries the span, so HTTP delivery sends the
// span's traceparent (the app's span is a child of kretry's) and a Go
// handler can start child spans from it. A nil tp returns d unchanged.
func TraceDeliveries(d Deliverer, tp trace.TracerProvider, group string, statuses Statuses) Deliverer {
	if tp == nil {
		return d
	}
	return &tracedDeliverer{
		next:     d,
		tracer:   tp.Tracer(TracerName, trace.WithInstrumentationVersion(flow.Version), trace.WithSchemaURL(semconv.SchemaURL)),
		group:    group,
		statuses: statuses,
	}
}

type tracedDeliverer struct {
	next     Deliverer
	tracer   trace.Tracer
	group    string
	statuses Statuses
}

func (d *tracedDeliverer) Deliver(ctx context.Context, m *Message) (err error) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(d.attributes(m)...)}
	parent := ctx
	if producer := RecordTraceContext(m.Headers); producer.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
		if !trace.SpanContextFromContext(ctx).IsValid() {
			parent = trace.ContextWithRemoteSpanContext(ctx, producer)
		}
	}
	sctx, span := d.tracer.Start(parent, "process "+m.Topic, opts...)
	returned := false
	defer func() {
		if !returned {
			// d panicked: the panic goes on, unrecovered here so that the
			// engine's recover sees its stack; the span still ends.
			span.SetAttributes(semconv.ErrorTypeKey.String("other"))
			span.SetStatus(codes.Error, "the delivery handler panicked")
			span.End()
			return
		}
		d.end(span, err)
	}()
	err = d.next.Deliver(sctx, m)
	returned = true
	return err
}

func (d *tracedDeliverer) attributes(m *Message) []attribute.KeyValue {
	id := m.ID
	if id == "" {
		id = flow.RecordID(m.Topic, m.Partition, m.Offset)
	}
	kv := []attribute.KeyValue{
		semconv.MessagingSystemKafka,
		semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingDestinationName(m.Topic),
		semconv.MessagingDestinationPartitionID(strconv.FormatInt(int64(m.Partition), 10)),
		semconv.MessagingKafkaOffset(int(m.Offset)),
		semconv.MessagingMessageID(id),
		AttrAttempt.Int(m.Attempt),
	}
	if d.group != "" {
		kv = append(kv, semconv.MessagingConsumerGroupName(d.group))
	}
	if m.Key != nil && printable(m.Key) {
		kv = append(kv, semconv.MessagingKafkaMessageKey(string(m.Key)))
	}
	if m.Value == nil {
		kv = append(kv, semconv.MessagingKafkaMessageTombstone(true))
	}
	return kv
}

func (d *tracedDeliverer) end(span trace.Span, err error) {
	if err == nil {
		span.SetAttributes(AttrOutcome.String(string(flow.OutcomeOK)))
		span.End()
		return
	}
	v := Classify(err, d.statuses)
	span.SetAttributes(AttrOutcome.String(string(v.Class)), semconv.ErrorTypeKey.String(ErrorType(err, v)))
	span.SetStatus(codes.Error, truncate(v.Message, maxStatusDescription))
	span.End()
}

// printable reports whether key has a canonical string form: valid UTF-8
// without control characters.
func printable(key []byte) bool {
	if !utf8.Valid(key) {
		return false
	}
	for _, r := range string(key) {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
