package delivery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/kretry/kretry/pkg/flow"
)

// Class is the route class of a failed delivery, as written in the
// kretry-error-class header.
type Class string

const (
	// ClassTransient failures go to the next retry tier.
	ClassTransient Class = "transient"
	// ClassPermanent failures go to the DLQ at once.
	ClassPermanent Class = "permanent"
	// ClassExhausted marks a record dead-lettered after its last tier.
	ClassExhausted Class = "exhausted"
	// ClassExpired marks a record dead-lettered undelivered because it was
	// older than its topic's max_age (docs/OVERLOAD.md).
	ClassExpired Class = "expired"
)

// Sentinels that a handler wraps its error with (or returns through
// Permanent, Transient and RetryAfter) to choose the route explicitly.
var (
	// ErrPermanent routes the record to the DLQ at once.
	ErrPermanent = errors.New("permanent failure")
	// ErrTransient routes the record to the next retry tier.
	ErrTransient = errors.New("transient failure")
)

// ErrClosedBeforeAnswer reports an HTTP delivery whose connection the app
// (or a proxy in front of it) closed before any answer: net/http's bare
// "EOF". It is a connection error: transient, error type "connection".
var ErrClosedBeforeAnswer = errors.New("the app closed the connection before answering")

// StatusError is an application answer that was not 2xx. HTTP returns it;
// a Go handler may return it too to reuse the status lists of the topic.
type StatusError struct {
	// Status is the HTTP status code.
	Status int
	// RetryAfter is the parsed Retry-After header, 0 when absent. It is a
	// lower bound on the next delay.
	RetryAfter time.Duration
	// Body is the error message: the start of the response body (at most
	// MaxErrorBody bytes, valid UTF-8) with whitespace runs collapsed to
	// one space, or for an HTML page its <title> (else its first text).
	Body string
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("status %d", e.Status)
	}
	return fmt.Sprintf("status %d: %s", e.Status, e.Body)
}

type classified struct {
	err        error
	class      Class
	retryAfter time.Duration
}

func (c *classified) Error() string { return c.err.Error() }
func (c *classified) Unwrap() []error {
	s := ErrTransient
	if c.class == ClassPermanent {
		s = ErrPermanent
	}
	return []error{c.err, s}
}

// Permanent marks err as permanent: the record goes to the DLQ at once.
// A nil err yields a generic permanent error.
func Permanent(err error) error {
	if err == nil {
		err = ErrPermanent
	}
	return &classified{err: err, class: ClassPermanent}
}

// Transient marks err as transient: the record goes to the next retry tier.
// A nil err yields a generic transient error.
func Transient(err error) error {
	if err == nil {
		err = ErrTransient
	}
	return &classified{err: err, class: ClassTransient}
}

// RetryAfter marks err as transient with a lower bound d on the next delay.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		err = ErrTransient
	}
	return &classified{err: err, class: ClassTransient, retryAfter: max(d, 0)}
}

// Statuses lists the HTTP statuses with a fixed class. Statuses in neither
// list (other than 2xx) are transient and flagged Unlisted.
type Statuses struct {
	Permanent []int
	Transient []int
}

// DefaultStatuses are the DESIGN.md defaults: flow.DefaultPermanent and
// flow.DefaultTransient.
var DefaultStatuses = Statuses{
	Permanent: flow.DefaultPermanent(),
	Transient: flow.DefaultTransient(),
}

// ErrorType is the low-cardinality kind of a failed delivery, the
// error.type of its span and of messaging.process.duration (OpenTelemetry
// semantic conventions, "Recording errors"): the HTTP status as text
// ("503"), "timeout", "other" for an error of no listed kind, else
// "connection".
func ErrorType(err error, v Verdict) string {
	switch {
	case v.Status != 0:
		return strconv.Itoa(v.Status)
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case v.Unlisted:
		return "other"
	default:
		return "connection"
	}
}

// Verdict is how one failed delivery is routed.
type Verdict struct {
	// Class is ClassTransient or ClassPermanent.
	Class Class
	// Status is the HTTP status, 0 when there was none (timeout,
	// refused connection, handler error).
	Status int
	// RetryAfter is a lower bound on the next delay, 0 for none.
	RetryAfter time.Duration
	// Message is the error text for kretry-error-message (untruncated).
	Message string
	// Unlisted is true when the class was chosen by the fallback rule
	// (a status in neither list, or an error of unknown kind); the caller
	// logs such a case once.
	Unlisted bool
}

// Classify routes a non-nil delivery error, in this order:
//  1. an error marked by Permanent, Transient or RetryAfter (or wrapping
//     ErrPermanent / ErrTransient) keeps its class;
//  2. a *StatusError is permanent when its status is in s.Permanent,
//     transient when in s.Transient, otherwise transient and Unlisted;
//  3. timeouts (context.DeadlineExceeded, net.Error.Timeout) and connection
//     errors (refused, reset, broken pipe, unreachable, closed before an
//     answer: ErrClosedBeforeAnswer) are transient;
//  4. anything else is transient and Unlisted.
func Classify(err error, s Statuses) Verdict {
	v := Verdict{Class: ClassTransient, Message: err.Error()}
	var se *StatusError
	if errors.As(err, &se) {
		v.Status = se.Status
		v.RetryAfter = se.RetryAfter
	}
	var c *classified
	switch {
	case errors.As(err, &c):
		v.Class = c.class
		v.RetryAfter = max(v.RetryAfter, c.retryAfter)
		return v
	case errors.Is(err, ErrPermanent):
		v.Class = ClassPermanent
		return v
	case errors.Is(err, ErrTransient):
		return v
	case se != nil:
		switch {
		case slices.Contains(s.Permanent, se.Status):
			v.Class = ClassPermanent
		case slices.Contains(s.Transient, se.Status):
		default:
			v.Unlisted = true
		}
		return v
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout(),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, ErrClosedBeforeAnswer),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
	default:
		v.Unlisted = true
	}
	return v
}
