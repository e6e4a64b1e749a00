package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/kretry/kretry/pkg/config"
)

// Clients builds every Kafka client of a kretry process from the kafka
// section of its config — the engines' (through [Clients.Opts]), the lag
// monitor's, and those of `kretry lag` and `kretry parking release` — so
// that each gets the same seed brokers, client id, TLS, SASL and logger.
// [Clients.Ping] is the check at start that a broker answers and accepts
// those settings.
type Clients struct {
	// Brokers are the seed brokers.
	Brokers []string
	// Embedded is set when Brokers is embedded.listen standing in for
	// kafka.brokers [embedded] (a command dialing the embedded broker of
	// another process): errors then name that key.
	Embedded bool

	opts []kgo.Opt // ClientOpts, without the seed brokers
	sec  security  // what error messages may say about the settings
}

// security is what [Clients.Ping]'s errors say about the TLS and SASL
// settings. It has no password: nothing built from it can leak one.
type security struct {
	tls              bool
	caFile, certFile string
	mechanism, user  string
	// certNotBefore and certNotAfter are the client certificate's
	// validity (zero without one, or when it does not parse).
	certNotBefore, certNotAfter time.Time
}

// NewClients returns the client builder for kafka section k and seed
// brokers (kafka.brokers, or the embedded broker's address when Run
// started it); the clients log through log (see [ClientOpts]).
func NewClients(k *config.Kafka, brokers []string, log *slog.Logger) (*Clients, error) {
	opts, err := ClientOpts(k, log)
	if err != nil {
		return nil, err
	}
	c := &Clients{
		Brokers: slices.Clone(brokers),
		opts:    opts,
		sec: security{
			tls: k.TLS.Enabled, caFile: k.TLS.CAFile, certFile: k.TLS.CertFile,
			mechanism: strings.ToLower(k.SASL.Mechanism), user: k.SASL.Username,
		},
	}
	if k.TLS.Enabled && k.TLS.CertFile != "" {
		if b, err := os.ReadFile(k.TLS.CertFile); err == nil {
			if blk, _ := pem.Decode(b); blk != nil {
				if leaf, err := x509.ParseCertificate(blk.Bytes); err == nil {
					c.sec.certNotBefore, c.sec.certNotAfter = leaf.NotBefore, leaf.NotAfter
				}
			}
		}
	}
	return c, nil
}

// CommandClients is NewClients for a command that does not run the
// embedded broker itself (`kretry lag`, `kretry parking release`): the seed
// brokers are kafka.brokers, or embedded.listen when kafka.brokers is
// [embedded] (see [SeedBrokers]).
func CommandClients(cfg *config.Config, log *slog.Logger) (*Clients, error) {
	brokers, embedded := SeedBrokers(&cfg.Kafka, &cfg.Embedded)
	c, err := NewClients(&cfg.Kafka, brokers, log)
	if err != nil {
		return nil, err
	}
	c.Embedded = embedded
	return c, nil
}

// Opts returns the options of a client: the seed brokers, client id, TLS,
// SASL and logger, then extra. The slice is new: callers may append to it.
func (c *Clients) Opts(extra ...kgo.Opt) []kgo.Opt {
	out := make([]kgo.Opt, 0, len(c.opts)+1+len(extra))
	out = append(out, c.opts...)
	out = append(out, kgo.SeedBrokers(c.Brokers...))
	return append(out, extra...)
}

// New returns a client with [Clients.Opts] and extra.
func (c *Clients) New(extra ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(c.Opts(extra...)...)
}

// DialTimeout bounds one connection attempt to a broker, the TLS handshake
// included (franz-go's default dial timeout).
const DialTimeout = 10 * time.Second

// ClientOpts turns the kafka section into franz-go options for every
// client (without the seed brokers: see [Clients]): client ID, TLS, SASL
// and the client's own logs through slog (kslog) at warn level, its
// repeated lines held back (quietRepeats). A TLS
// handshake that fails is returned wrapped in a *[HandshakeError].
func ClientOpts(k *config.Kafka, log *slog.Logger) ([]kgo.Opt, error) {
	opts := []kgo.Opt{
		kgo.ClientID(k.ClientID),
		kgo.WithLogger(kslog.New(slog.New(newQuietRepeats(minLevel{log.Handler(), kafkaLogLevel(log)}, RepeatWindow)).With("component", "kafka-client"))),
	}
	if k.TLS.Enabled {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: k.TLS.InsecureSkipVerify} //nolint:gosec // opt-in by config
		if k.TLS.CAFile != "" {
			pem, err := os.ReadFile(k.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka.tls.ca_file: %q holds no PEM certificate", k.TLS.CAFile)
			}
			tc.RootCAs = pool
		}
		if k.TLS.CertFile != "" || k.TLS.KeyFile != "" {
			r, err := newCertReloader(k.TLS.CertFile, k.TLS.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka.tls.cert_file/key_file: %w", err)
			}
			tc.GetClientCertificate = r.get
		}
		opts = append(opts, kgo.Dialer(tlsDialer(tc)))
	}
	switch strings.ToLower(k.SASL.Mechanism) {
	case "":
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: k.SASL.Username, Pass: k.SASL.Password}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("kafka.sasl.mechanism: %q is not supported", k.SASL.Mechanism)
	}
	return opts, nil
}

// HandshakeError is a TLS handshake with a broker that failed: the
// connection was opened, then the handshake did not complete (the broker
// is not a TLS listener, its certificate is not trusted, it refused the
// client's certificate, or it did not answer in time).
type HandshakeError struct {
	// Addr is the broker's host:port.
	Addr string
	// Err is crypto/tls's error (an x509 error for a certificate that
	// does not verify).
	Err error
}

func (e *HandshakeError) Error() string {
	return fmt.Sprintf("TLS handshake with %s: %v", e.Addr, e.Err)
}

func (e *HandshakeError) Unwrap() error { return e.Err }

// tlsDialer is franz-go's TLS dial (kgo.DialTLSConfig: the server name is
// the host dialed unless tc sets one), with the handshake's failure told
// apart from the TCP connection's: a refused or timed out connection is
// returned as is, a failed handshake as a *HandshakeError.
func tlsDialer(tc *tls.Config) func(ctx context.Context, network, host string) (net.Conn, error) {
	nd := &net.Dialer{Timeout: DialTimeout}
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, DialTimeout)
		defer cancel()
		raw, err := nd.DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		c := tc.Clone()
		if c.ServerName == "" {
			server, _, err := net.SplitHostPort(host)
			if err != nil {
				raw.Close()
				return nil, fmt.Errorf("unable to split host:port for dialing: %w", err)
			}
			c.ServerName = server
		}
		conn := tls.Client(raw, c)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, &HandshakeError{Addr: host, Err: err}
		}
		return conn, nil
	}
}

// kafkaLogLevel is the least level of franz-go's own logs: warn, or info
// when kretry logs at debug. franz-go logs every transaction at info, which
// would be a line per batch at kretry's default level.
func kafkaLogLevel(log *slog.Logger) slog.Level {
	if log.Enabled(context.Background(), slog.LevelDebug) {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(as), h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{h.Handler.WithGroup(name), h.min}
}

// certReloader hands the client certificate to each TLS handshake, read
// again from its files when they changed since (a certificate renewed on
// disk, as cert-manager does, is used from the next connection on without a
// restart). A pair that does not load keeps the last good one.
type certReloader struct {
	certFile, keyFile string

	mu    sync.Mutex
	cert  *tls.Certificate
	stamp [2]fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if err := r.load(r.stamps()); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) stamps() [2]fileStamp {
	var out [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			out[i] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return out
}

func (r *certReloader) load(st [2]fileStamp) error {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.cert, r.stamp = &cert, st
	return nil
}

func (r *certReloader) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if st := r.stamps(); st != r.stamp {
		_ = r.load(st) // a half-written pair: keep the last good one, try again next time
	}
	return r.cert, nil
}
