package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
)

func TestClassify(t *testing.T) {
	var (
		boom = errors.New("boom")
		perm = delivery.ClassPermanent
		tran = delivery.ClassTransient
	)
	status := func(code int) error { return &delivery.StatusError{Status: code, Body: "b"} }
	netErr := func(op string, err error) error {
		return &url.Error{Op: "Post", URL: "http://127.0.0.1:8080", Err: &net.OpError{Op: op, Net: "tcp", Err: err}}
	}
	type want struct {
		class      delivery.Class
		status     int
		retryAfter time.Duration
		unlisted   bool
	}
	tests := []struct {
		name     string
		err      error
		statuses *delivery.Statuses // nil: DefaultStatuses
		want     want
	}{
		// 1. explicit marks
		{name: "Permanent", err: delivery.Permanent(boom), want: want{class: perm}},
		{name: "Permanent(nil)", err: delivery.Permanent(nil), want: want{class: perm}},
		{name: "Transient", err: delivery.Transient(boom), want: want{class: tran}},
		{name: "Transient(nil)", err: delivery.Transient(nil), want: want{class: tran}},
		{name: "RetryAfter", err: delivery.RetryAfter(boom, 5*time.Second), want: want{class: tran, retryAfter: 5 * time.Second}},
		{name: "RetryAfter(nil)", err: delivery.RetryAfter(nil, time.Second), want: want{class: tran, retryAfter: time.Second}},
		{name: "RetryAfter negative", err: delivery.RetryAfter(boom, -time.Second), want: want{class: tran}},
		{name: "Permanent wrapped %w", err: fmt.Errorf("order 7: %w", delivery.Permanent(boom)), want: want{class: perm}},
		{name: "Transient wrapped %w", err: fmt.Errorf("order 7: %w", delivery.Transient(boom)), want: want{class: tran}},
		{name: "RetryAfter wrapped %w twice", err: fmt.Errorf("a: %w", fmt.Errorf("b: %w", delivery.RetryAfter(boom, time.Minute))),
			want: want{class: tran, retryAfter: time.Minute}},
		{name: "ErrPermanent wrapped", err: fmt.Errorf("bad schema: %w", delivery.ErrPermanent), want: want{class: perm}},
		{name: "ErrTransient wrapped", err: fmt.Errorf("db down: %w", delivery.ErrTransient), want: want{class: tran}},
		{name: "ErrPermanent joined", err: errors.Join(boom, delivery.ErrPermanent), want: want{class: perm}},
		{name: "outer mark wins", err: delivery.Permanent(delivery.Transient(boom)), want: want{class: perm}},
		{name: "mark overrides a transient status", err: delivery.Permanent(status(503)), want: want{class: perm, status: 503}},
		{name: "mark overrides a permanent status", err: delivery.Transient(status(422)), want: want{class: tran, status: 422}},
		{name: "mark overrides an unlisted status", err: delivery.Transient(status(418)), want: want{class: tran, status: 418}},
		{name: "RetryAfter below the status's", err: delivery.RetryAfter(&delivery.StatusError{Status: 503, RetryAfter: 10 * time.Second}, 5*time.Second),
			want: want{class: tran, status: 503, retryAfter: 10 * time.Second}},
		{name: "RetryAfter above the status's", err: delivery.RetryAfter(&delivery.StatusError{Status: 503, RetryAfter: 3 * time.Second}, 5*time.Second),
			want: want{class: tran, status: 503, retryAfter: 5 * time.Second}},
		{name: "mark on a timeout", err: delivery.Permanent(context.DeadlineExceeded), want: want{class: perm}},

		// 2. statuses
		{name: "status retry after kept", err: &delivery.StatusError{Status: 429, RetryAfter: 7 * time.Second},
			want: want{class: tran, status: 429, retryAfter: 7 * time.Second}},
		{name: "status wrapped %w", err: fmt.Errorf("deliver: %w", status(422)), want: want{class: perm, status: 422}},
		{name: "status 418 unlisted", err: status(418), want: want{class: tran, status: 418, unlisted: true}},
		{name: "status 302 unlisted", err: status(302), want: want{class: tran, status: 302, unlisted: true}},
		{name: "status 101 unlisted", err: status(101), want: want{class: tran, status: 101, unlisted: true}},
		{name: "status 501 unlisted", err: status(501), want: want{class: tran, status: 501, unlisted: true}},
		{name: "custom lists: 503 permanent", err: status(503), statuses: &delivery.Statuses{Permanent: []int{503}},
			want: want{class: perm, status: 503}},
		{name: "custom lists: 418 transient", err: status(418), statuses: &delivery.Statuses{Transient: []int{418}},
			want: want{class: tran, status: 418}},
		{name: "empty lists: 422 unlisted", err: status(422), statuses: &delivery.Statuses{},
			want: want{class: tran, status: 422, unlisted: true}},

		// 3. timeouts and connection errors
		{name: "DeadlineExceeded", err: context.DeadlineExceeded, want: want{class: tran}},
		{name: "DeadlineExceeded in url.Error", err: &url.Error{Op: "Post", URL: "http://app", Err: context.DeadlineExceeded}, want: want{class: tran}},
		{name: "net timeout", err: netErr("read", os.ErrDeadlineExceeded), want: want{class: tran}},
		{name: "ECONNREFUSED", err: netErr("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED)), want: want{class: tran}},
		{name: "ECONNRESET", err: netErr("read", os.NewSyscallError("read", syscall.ECONNRESET)), want: want{class: tran}},
		{name: "EHOSTUNREACH", err: netErr("dial", os.NewSyscallError("connect", syscall.EHOSTUNREACH)), want: want{class: tran}},
		{name: "ENETUNREACH", err: netErr("dial", os.NewSyscallError("connect", syscall.ENETUNREACH)), want: want{class: tran}},

		// 4. fallback
		{name: "unknown error", err: boom, want: want{class: tran, unlisted: true}},
		{name: "unknown wrapped", err: fmt.Errorf("x: %w", io.ErrUnexpectedEOF), want: want{class: tran, unlisted: true}},
		{name: "context.Canceled", err: context.Canceled, want: want{class: tran, unlisted: true}},
		{name: "other syscall error", err: netErr("dial", os.NewSyscallError("socket", syscall.EMFILE)), want: want{class: tran, unlisted: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := delivery.DefaultStatuses
			if tt.statuses != nil {
				s = *tt.statuses
			}
			v := delivery.Classify(tt.err, s)
			got := want{class: v.Class, status: v.Status, retryAfter: v.RetryAfter, unlisted: v.Unlisted}
			if got != tt.want {
				t.Errorf("Classify(%v) = %+v, want %+v", tt.err, got, tt.want)
			}
			if v.Message != tt.err.Error() {
				t.Errorf("Message %q, want %q", v.Message, tt.err.Error())
			}
		})
	}
}

func TestClassifyDefaultStatuses(t *testing.T) {
	for _, tt := range []struct {
		codes []int
		class delivery.Class
	}{
		{delivery.DefaultStatuses.Permanent, delivery.ClassPermanent},
		{delivery.DefaultStatuses.Transient, delivery.ClassTransient},
	} {
		for _, code := range tt.codes {
			v := delivery.Classify(&delivery.StatusError{Status: code}, delivery.DefaultStatuses)
			if v.Class != tt.class || v.Unlisted || v.Status != code {
				t.Errorf("status %d: %+v, want listed %s", code, v, tt.class)
			}
		}
	}
	// DESIGN.md, "HTTP contract with the app".
	want := delivery.Statuses{
		Permanent: []int{400, 404, 409, 410, 413, 415, 422},
		Transient: []int{408, 425, 429, 500, 502, 503, 504},
	}
	if fmt.Sprint(delivery.DefaultStatuses) != fmt.Sprint(want) {
		t.Errorf("DefaultStatuses = %v, want %v", delivery.DefaultStatuses, want)
	}
}

func TestMarksUnwrap(t *testing.T) {
	boom := errors.New("boom")
	for _, tt := range []struct {
		err      error
		sentinel error
	}{
		{delivery.Permanent(boom), delivery.ErrPermanent},
		{delivery.Transient(boom), delivery.ErrTransient},
		{delivery.RetryAfter(boom, time.Second), delivery.ErrTransient},
	} {
		if !errors.Is(tt.err, boom) || !errors.Is(tt.err, tt.sentinel) {
			t.Errorf("%v: Is(cause) %v, Is(%v) %v", tt.err, errors.Is(tt.err, boom), tt.sentinel, errors.Is(tt.err, tt.sentinel))
		}
		if tt.err.Error() != "boom" {
			t.Errorf("Error() = %q, want the cause's text", tt.err.Error())
		}
	}
	if errors.Is(delivery.Permanent(boom), delivery.ErrTransient) || errors.Is(delivery.Transient(boom), delivery.ErrPermanent) {
		t.Error("a mark matches the other sentinel")
	}
	se := &delivery.StatusError{Status: 503}
	if got := fmt.Sprint(se); got != "status 503" {
		t.Errorf("StatusError without body: %q", got)
	}
	se.Body = "busy"
	if got := fmt.Sprint(se); got != "status 503: busy" {
		t.Errorf("StatusError with body: %q", got)
	}
}
