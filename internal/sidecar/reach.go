package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/config"
)

// UnreachableError is returned at start when no broker answers: it names
// the addresses, the config key they come from and what to do.
type UnreachableError struct {
	// Addrs are the addresses dialed.
	Addrs []string
	// Embedded is set when kafka.brokers is [embedded] and a command that
	// does not run the broker itself (kretry lag, kretry parking release)
	// dialed embedded.listen.
	Embedded bool
	// Err is the error of the attempt (with several addresses, each
	// address's, prefixed with it).
	Err error
}

func (e *UnreachableError) Error() string {
	addrs := strings.Join(e.Addrs, ",")
	if e.Embedded {
		return fmt.Sprintf("no Kafka broker answered at %s (embedded.listen, as kafka.brokers is [embedded]): %v; "+
			"the embedded broker runs inside `kretry run` or `kretry broker`: start one of them with this config first, "+
			"or set kafka.brokers (KRETRY_KAFKA__BROKERS) to your cluster", addrs, e.Err)
	}
	return fmt.Sprintf("no Kafka broker answered at %s (kafka.brokers): %v; "+
		"check that the brokers are up and that kafka.brokers (KRETRY_KAFKA__BROKERS) lists addresses reachable from here", addrs, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// SecurityError is returned at start when a broker was reached but the
// connection's TLS or SASL failed: it names what failed, the broker's
// address and the config keys to check. It never holds the SASL
// password.
type SecurityError struct {
	// What failed, e.g. "SASL authentication failed",
	// "TLS: certificate signed by unknown authority",
	// "TLS handshake failed".
	What string
	// Addr is the broker's host:port; Key the config key it comes from
	// (kafka.brokers, or embedded.listen).
	Addr, Key string
	// Hint says what to check.
	Hint string
	// Err is the client's error.
	Err error
}

func (e *SecurityError) Error() string {
	return fmt.Sprintf("%s: broker %s (%s): %s (%v)", e.What, e.Addr, e.Key, e.Hint, e.Err)
}

func (e *SecurityError) Unwrap() error { return e.Err }

// PingTimeout bounds Ping.
const PingTimeout = 15 * time.Second

// Ping checks, before anything else starts, that a broker answers and
// accepts the TLS and SASL settings: each seed broker is asked for
// metadata once, all at once, by a client of its own, at most PingTimeout
// in all. It returns nil as soon as one answers. Otherwise it returns a
// *SecurityError when a broker was reached but TLS or SASL failed (the
// first such broker in kafka.brokers order), else an *UnreachableError.
func (c *Clients) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	errs := make([]error, len(c.Brokers))
	var wg sync.WaitGroup
	var once sync.Once
	ok := false
	for i, addr := range c.Brokers {
		wg.Go(func() {
			cl, err := kgo.NewClient(append(c.Opts(), kgo.SeedBrokers(addr))...)
			if err == nil {
				err = cl.Ping(ctx)
				cl.Close()
			}
			if err == nil {
				once.Do(func() { ok = true; cancel() })
				return
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if ok {
		return nil
	}
	key := "kafka.brokers"
	if c.Embedded {
		key = "embedded.listen"
	}
	for i, err := range errs {
		if se := c.sec.classify(c.Brokers[i], key, err); se != nil {
			return se
		}
	}
	err := errs[0]
	if len(errs) > 1 {
		err = addrErrors{c.Brokers, errs}
	}
	return &UnreachableError{Addrs: c.Brokers, Embedded: c.Embedded, Err: err}
}

// addrErrors are the errors of several addresses, one each.
type addrErrors struct {
	addrs []string
	errs  []error
}

func (e addrErrors) Error() string {
	parts := make([]string, len(e.errs))
	for i, err := range e.errs {
		parts[i] = e.addrs[i] + ": " + err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e addrErrors) Unwrap() []error { return e.errs }

// classify returns a *SecurityError when err says that the broker at addr
// was reached and refused the connection's TLS or SASL, else nil (the
// broker did not answer: an *UnreachableError). The first check that
// recognises err words it.
func (s security) classify(addr, key string, err error) *SecurityError {
	checks := []func(addr, key string, err error) (what, hint string){
		s.serverCertProblem, s.clientCertProblem, s.handshakeProblem, s.saslProblem, s.listenerProblem,
	}
	for _, check := range checks {
		if what, hint := check(addr, key, err); what != "" {
			return &SecurityError{What: what, Addr: addr, Key: key, Hint: hint, Err: err}
		}
	}
	return nil
}

// serverCertProblem says what failed and what to check when err is the
// client's refusal of the broker's certificate; "" when it is not.
func (s security) serverCertProblem(addr, key string, err error) (what, hint string) {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &unknownCA):
		if s.caFile == "" {
			return "TLS: certificate signed by unknown authority",
				"check kafka.tls.ca_file: it is unset, so only the system's CAs are trusted; set it to the PEM file of the CA that signed the brokers' certificates"
		}
		return "TLS: certificate signed by unknown authority",
			fmt.Sprintf("check kafka.tls.ca_file: the broker's certificate does not chain to a CA in %q", s.caFile)
	case errors.As(err, &hostname):
		return "TLS: the broker's certificate does not name the address dialed",
			fmt.Sprintf("use in %s a host name or IP address that the broker's certificate lists (its subject alternative names)", key)
	case errors.As(err, &invalid):
		return "TLS: the broker's certificate is not valid",
			"check the broker's certificate (validity dates, key usage) and kafka.tls.ca_file"
	}
	return "", ""
}

// clientCertProblem says what failed and what to check when err is a
// TLS alert from the broker about the client's certificate (or its
// absence); "" when it is not.
func (s security) clientCertProblem(addr, key string, err error) (what, hint string) {
	// crypto/tls's texts of the alerts a broker sends about the client's
	// certificate ("unknown certificate" is certificate_unknown, which
	// Java sends for an expired one; it also prefixes
	// "unknown certificate authority").
	clientCert := isRemoteTLS(err) && containsAny(err.Error(), "bad certificate", "certificate required",
		"unknown certificate", "expired certificate", "revoked certificate", "unsupported certificate", "access denied")
	switch {
	case !clientCert:
		return "", ""
	case s.certFile == "":
		return "TLS: the broker requires a client certificate",
			fmt.Sprintf("the listener at %s authenticates clients by certificate (ssl.client.auth=required): set kafka.tls.cert_file and kafka.tls.key_file", addr)
	case !s.certNotAfter.IsZero() && time.Now().After(s.certNotAfter):
		return "TLS: the broker refused the client certificate",
			fmt.Sprintf("kafka.tls.cert_file (%q) expired on %s: renew it", s.certFile, s.certNotAfter.UTC().Format(time.RFC3339))
	case time.Now().Before(s.certNotBefore):
		return "TLS: the broker refused the client certificate",
			fmt.Sprintf("kafka.tls.cert_file (%q) is not valid before %s: check it, and this host's clock", s.certFile, s.certNotBefore.UTC().Format(time.RFC3339))
	}
	return "TLS: the broker refused the client certificate",
		fmt.Sprintf("check kafka.tls.cert_file (%q) and kafka.tls.key_file: the broker must trust the CA that signed the certificate", s.certFile)
}

// handshakeProblem says what failed and what to check when err ended the
// TLS handshake (a plaintext listener, a timeout, any other alert); ""
// when it did not.
func (s security) handshakeProblem(addr, key string, err error) (what, hint string) {
	var (
		hs        *HandshakeError
		recordHdr tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &hs) && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.As(err, &recordHdr)):
		return "TLS handshake failed",
			fmt.Sprintf("is %s a TLS listener? kafka.tls.enabled is true, but the broker ended the handshake at the first message, as a plaintext listener does", addr)
	case errors.As(err, &hs) && errors.Is(err, context.DeadlineExceeded):
		return "TLS handshake failed",
			fmt.Sprintf("the broker did not complete the handshake within %v: is %s a TLS listener?", DialTimeout, addr)
	case errors.As(err, &hs) || isRemoteTLS(err):
		return "TLS handshake failed", fmt.Sprintf("check kafka.tls (enabled, ca_file, cert_file, key_file) against the listener at %s", addr)
	}
	return "", ""
}

// saslProblem says what failed and what to check when err is the
// broker's refusal of the SASL handshake or credentials; "" when it is
// not.
func (s security) saslProblem(addr, key string, err error) (what, hint string) {
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return "SASL authentication failed",
			fmt.Sprintf("check kafka.sasl.username (%q) and kafka.sasl.password (KRETRY_KAFKA__SASL__PASSWORD) for mechanism %s", s.user, s.mechanism)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return "SASL: mechanism not enabled on the broker",
			fmt.Sprintf("kafka.sasl.mechanism is %s: use a mechanism the listener at %s enables (its sasl.enabled.mechanisms)", s.mechanism, addr)
	case errors.Is(err, kerr.IllegalSaslState) && s.mechanism != "":
		return "SASL: the listener does not use SASL",
			fmt.Sprintf("is %s a SASL listener? kafka.sasl.mechanism is %s, but the broker refused the SASL handshake: use the SASL listener's port in %s, or unset kafka.sasl.mechanism", addr, s.mechanism, key)
	}
	return "", ""
}

// listenerProblem says what failed and what to check when err shows a
// listener that expects TLS or SASL where none is configured (or closed
// the connection at the first request); "" when it does not.
func (s security) listenerProblem(addr, key string, err error) (what, hint string) {
	var firstEOF *kgo.ErrFirstReadEOF
	switch {
	case !s.tls && containsAny(err.Error(), "tls endpoint", "tls alert record"):
		return "the broker expects TLS",
			fmt.Sprintf("%s is a TLS listener: set kafka.tls.enabled: true (and kafka.tls.ca_file)", addr)
	case errors.As(err, &firstEOF) && s.mechanism == "":
		return "the broker closed the connection after the first request",
			fmt.Sprintf("the listener at %s may require SASL: set kafka.sasl.mechanism, kafka.sasl.username and kafka.sasl.password", addr)
	case errors.As(err, &firstEOF):
		return "the broker closed the connection after the first request",
			fmt.Sprintf("check that kafka.tls and kafka.sasl match the listener at %s", addr)
	}
	return "", ""
}

// isRemoteTLS reports whether err carries a TLS alert sent by the broker.
func isRemoteTLS(err error) bool { return strings.Contains(err.Error(), "remote error: tls: ") }

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// SeedBrokers returns the addresses a command that does not run the
// embedded broker dials: kafka.brokers, or embedded.listen when
// kafka.brokers is [embedded] (then embedded is true).
func SeedBrokers(k *config.Kafka, e *config.Broker) (addrs []string, embedded bool) {
	if len(k.Brokers) == 1 && k.Brokers[0] == config.Embedded {
		return []string{e.Listen}, true
	}
	return k.Brokers, false
}
