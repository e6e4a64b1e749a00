package sidecar_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/config"
)

// TestPingSecured runs the check at start against one Kafka node with a
// SASL_SSL (SCRAM-SHA-512) and an SSL (client certificate required)
// listener: the right settings pass; each wrong one gives a
// *SecurityError that names the broker, what failed and the key to
// check, within PingTimeout, and never the password.
func TestPingSecured(t *testing.T) {
	if kinds, err := kafkatest.Kinds(); err != nil || !slices.Contains(kinds, kafkatest.Kafka) {
		t.Skipf("needs real Kafka (%s=%s)", kafkatest.EnvBroker, kafkatest.Kafka)
	}
	const user, password = "kretry", "pw-Zq7-never-printed"
	c := kafkatest.New(t, kafkatest.Config{Security: &kafkatest.Security{SASLSSL: true, SSL: true, Users: map[string]string{user: password}}})
	files := c.TLS()
	otherCA, err := kafkatest.WriteCAFile(t.TempDir(), "other-ca.pem")
	if err != nil {
		t.Fatal(err)
	}
	sasl := func(pass string) config.SASL {
		return config.SASL{Mechanism: "scram-sha-512", Username: user, Password: pass}
	}
	tlsCA := func(ca string) config.TLS { return config.TLS{Enabled: true, CAFile: ca} }
	mtls := config.TLS{Enabled: true, CAFile: files.CA, CertFile: files.ClientCert, KeyFile: files.ClientKey}
	saslAddr, sslAddr, plainAddr := c.SASLSSLAddrs()[0], c.SSLAddrs()[0], c.Addrs()[0]

	for _, tc := range []struct {
		name string
		addr string
		tls  config.TLS
		sasl config.SASL
		want []string // in the error; none: Ping succeeds
	}{
		{"SASL_SSL", saslAddr, tlsCA(files.CA), sasl(password), nil},
		{"SSL with a client certificate", sslAddr, mtls, config.SASL{}, nil},
		{"wrong password", saslAddr, tlsCA(files.CA), sasl("wrong-password"),
			[]string{"SASL authentication failed", saslAddr, "kafka.sasl.username", "kafka.sasl.password"}},
		{"unknown CA", saslAddr, tlsCA(otherCA), sasl(password),
			[]string{"TLS: certificate signed by unknown authority", saslAddr, "kafka.tls.ca_file", otherCA}},
		{"no CA file", saslAddr, config.TLS{Enabled: true}, sasl(password),
			[]string{"TLS: certificate signed by unknown authority", "kafka.tls.ca_file: it is unset"}},
		{"TLS to the plaintext port", plainAddr, tlsCA(files.CA), sasl(password),
			[]string{"TLS handshake failed", "is " + plainAddr + " a TLS listener?"}},
		{"no client certificate", sslAddr, tlsCA(files.CA), config.SASL{},
			[]string{"requires a client certificate", sslAddr, "kafka.tls.cert_file"}},
		{"plaintext to the TLS port", sslAddr, config.TLS{}, config.SASL{},
			[]string{"the broker expects TLS", sslAddr, "kafka.tls.enabled"}},
		{"no SASL on the SASL_SSL port", saslAddr, tlsCA(files.CA), config.SASL{},
			[]string{saslAddr, "may require SASL", "kafka.sasl.mechanism"}},
		{"SASL on the SSL port", sslAddr, mtls, sasl(password),
			[]string{"the listener does not use SASL", "is " + sslAddr + " a SASL listener?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := config.Kafka{Brokers: []string{tc.addr}, ClientID: "kretry", TLS: tc.tls, SASL: tc.sasl}
			kc, err := sidecar.NewClients(&k, k.Brokers, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = kc.Ping(context.Background())
			took := time.Since(start)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Ping: %v", err)
				}
				return
			}
			var se *sidecar.SecurityError
			if !errors.As(err, &se) {
				t.Fatalf("Ping: %T %v, want a *sidecar.SecurityError", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("the error holds the password:\n%v", err)
			}
			if took > sidecar.PingTimeout {
				t.Errorf("Ping took %v, more than %v", took, sidecar.PingTimeout)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), err)
		})
	}
}

// TestPingTLSToPlaintextListener needs no Kafka: a listener that closes
// each connection at the TLS hello (as Kafka's plaintext listener does)
// gives "TLS handshake failed" naming it, at once.
func TestPingTLSToPlaintextListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 5))
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	k := config.Kafka{Brokers: []string{addr}, ClientID: "kretry", TLS: config.TLS{Enabled: true}}
	kc, err := sidecar.NewClients(&k, k.Brokers, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = kc.Ping(context.Background())
	var se *sidecar.SecurityError
	if !errors.As(err, &se) || se.What != "TLS handshake failed" || !strings.Contains(err.Error(), "is "+addr+" a TLS listener?") {
		t.Fatalf("Ping: %T %v, want TLS handshake failed naming %s", err, err, addr)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Ping took %v", took)
	}
}

// TestPingNamesEachAddress: with two dead seed brokers the error names
// both, each with its own error, once.
func TestPingNamesEachAddress(t *testing.T) {
	a, b := freePort(t), freePort(t)
	k := config.Kafka{Brokers: []string{a, b}, ClientID: "kretry"}
	kc, err := sidecar.NewClients(&k, k.Brokers, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	err = kc.Ping(context.Background())
	var ue *sidecar.UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("Ping: %T %v, want an *UnreachableError", err, err)
	}
	for _, addr := range []string{a, b} {
		if n := strings.Count(err.Error(), addr+": unable to dial"); n != 1 {
			t.Errorf("%q names %s's error %d times, want once", err, addr, n)
		}
	}
	if n := strings.Count(err.Error(), "connection refused"); n != 2 {
		t.Errorf("%q says connection refused %d times, want twice", err, n)
	}
}
