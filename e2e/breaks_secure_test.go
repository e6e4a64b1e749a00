package e2e

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/internal/kafkatest"
)

// TestSecureStartErrors: a client certificate that expired (signed by the
// CA the brokers trust) and a broker dialed under a host name its
// certificate does not list each make `kretry run` exit 1 within 15s with
// the README's error for it.
func TestSecureStartErrors(t *testing.T) {
	if brokerKind != kafkatest.Kafka {
		t.Skip("the embedded broker has no TLS listener")
	}
	c := kafkatest.New(t, kafkatest.Config{Security: &kafkatest.Security{
		SASLSSL: true, SSL: true, Users: map[string]string{secureUser: securePassword},
	}})
	f := c.TLS()
	expiredCert, expiredKey, err := c.WriteClientCert(t.TempDir(), time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, sslPort, _ := net.SplitHostPort(c.SSLAddrs()[0])
	// /etc/hosts names 127.0.0.1 "localhost" and, on most hosts, the
	// host's own name; the brokers' certificate lists 127.0.0.1, ::1 and
	// localhost only.
	other := ""
	for _, h := range []string{"localhost.localdomain", "vm", "runsc"} {
		if addrs, err := net.DefaultResolver.LookupHost(context.Background(), h); err == nil && len(addrs) > 0 && addrs[0] == "127.0.0.1" {
			other = h
			break
		}
	}
	cases := []struct {
		name string
		s    secureKretry
		want []string
	}{
		{"expired client certificate", secureKretry{broker: c.SSLAddrs()[0], tls: tlsYAML(f.CA, expiredCert, expiredKey)},
			[]string{"TLS: the broker refused the client certificate", "broker " + c.SSLAddrs()[0], "kafka.tls.cert_file", "expired on"}},
	}
	if other != "" {
		addr := net.JoinHostPort(other, sslPort)
		cases = append(cases, struct {
			name string
			s    secureKretry
			want []string
		}{"host name not in the certificate", secureKretry{broker: addr, tls: tlsYAML(f.CA, f.ClientCert, f.ClientKey)},
			[]string{"TLS: the broker's certificate does not name the address dialed", "broker " + addr, "kafka.brokers"}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeSecureConfig(t, tc.s, "orders-errors", "http://127.0.0.1:1/unused", "")
			start := time.Now()
			_, stderr, code := runKretry(t, 30*time.Second, tc.s.env(), "run", "-c", cfg)
			took := time.Since(start)
			if code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			if took > 15*time.Second {
				t.Errorf("took %v to fail, want at most 15s", took.Round(time.Millisecond))
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}
