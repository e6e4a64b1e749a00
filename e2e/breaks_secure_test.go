package e2e

import (
	"context"
	"net"
	"net/http"
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
	t.Parallel()
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

// TestPasswordRotatedWhileRunning: the SASL password of kretry's user is
// changed on the cluster while `kretry run` is up (the brokers make
// connections re-authenticate every 3s, connections.max.reauth.ms). kretry
// cannot know the new password; what it does is observed here.
func TestPasswordRotatedWhileRunning(t *testing.T) {
	t.Parallel()
	if brokerKind != kafkatest.Kafka {
		t.Skip("the embedded broker has no SASL listener")
	}
	c := kafkatest.New(t, kafkatest.Config{
		Props:    map[string]string{"connections.max.reauth.ms": "3000"},
		Security: &kafkatest.Security{SASLSSL: true, Users: map[string]string{secureUser: securePassword}},
	})
	plain := c.Addrs()[0]
	createTopic(t, plain, "orders", 2)
	app := startStampApp(t)
	s := secureKretry{broker: c.SASLSSLAddrs()[0], tls: tlsYAML(c.TLS().CA, "", ""), sasl: true, password: securePassword}
	metrics := freeAddr(t)
	cfg := writeSecureConfig(t, s, "orders", app.url(), metrics)
	run := startKretryEnv(t, "run", s.env(), "run", "-c", cfg)
	cl := newClient(t, plain)
	produceValues(t, cl, seq("a", 4)...)
	app.waitAcked(t, 60*time.Second, seq("a", 4), func() { run.mustRun(t) })
	if err := c.AddSCRAMUser(context.Background(), secureUser, "R0tated-pw-do-not-print-77a1"); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	produceValues(t, cl, seq("b", 4)...)
	var exited bool
	poll(90*time.Second, func() bool { exited = run.exited(); return exited })
	code, ready := -1, 0
	if exited {
		code = run.cmd.ProcessState.ExitCode()
	} else if resp, err := http.Get("http://" + metrics + "/readyz"); err == nil {
		ready = resp.StatusCode
		resp.Body.Close()
	}
	delivered := 0
	for _, v := range seq("b", 4) {
		if !app.when(v).IsZero() {
			delivered++
		}
	}
	out := run.stderr.String()
	saslLines := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "SASL") || strings.Contains(l, "sasl") || strings.Contains(l, "uthentication") {
			saslLines++
		}
	}
	t.Logf("%v after the rotation: exited %v (code %d), /readyz %d, b records delivered %d/4, log lines naming SASL/authentication %d",
		time.Since(rotated).Round(time.Second), exited, code, ready, delivered, saslLines)
	for _, pw := range []string{securePassword, "R0tated-pw-do-not-print-77a1"} {
		if strings.Contains(out+run.stdout.String(), pw) {
			t.Errorf("kretry's output shows a SASL password")
		}
	}
	last := out
	if i := strings.LastIndex(out, "\n"); i > 0 {
		if j := strings.LastIndex(out[:i], "\n"); j > 0 {
			last = out[j:]
		}
	}
	t.Logf("last log line: %s", strings.TrimSpace(last))
	// Each episode of refusals is logged when it begins and when it ends:
	// more than one means kretry saw the refusals stop in between.
	began := strings.Count(out, `msg="the brokers refuse the client's credentials`)
	ended := strings.Count(out, `msg="the brokers no longer refuse the client's credentials`)
	t.Logf("episodes of refusals: %d began, %d ended", began, ended)
	if !exited {
		t.Errorf("kretry kept running %v with a password the cluster no longer accepts, /readyz %d, %d episodes of refusals began and %d ended: it should stop with an error naming SASL authentication, so that it is restarted with the new secret", time.Since(rotated).Round(time.Second), ready, began, ended)
	} else if code != 1 || !strings.Contains(out, "SASL authentication failed") {
		t.Errorf("kretry exited %d; want 1 with \"SASL authentication failed\"", code)
	}
}

// TestClientCertificateExpiresWhileRunning: kretry's client certificate
// (SSL listener, client certificate required) expires while it runs, and
// the broker restarts, so every connection makes a new handshake. Renewed
// on disk in time (as cert-manager does), the new certificate is used: the
// records are delivered. Not renewed, kretry must not retry forever while
// /readyz says ready: it exits 1 naming kafka.tls.cert_file once the
// broker has refused the certificate for 30s.
func TestClientCertificateExpiresWhileRunning(t *testing.T) {
	t.Parallel()
	if brokerKind != kafkatest.Kafka {
		t.Skip("the embedded broker has no TLS listener")
	}
	c := kafkatest.New(t, kafkatest.Config{Security: &kafkatest.Security{SSL: true}})
	plain := c.Addrs()[0]
	createTopic(t, plain, "orders", 2)
	for _, renew := range []bool{true, false} {
		name := map[bool]string{true: "renewed", false: "not renewed"}[renew]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			expiry := time.Now().Add(20 * time.Second)
			cert, key, err := c.WriteClientCert(dir, time.Now().Add(-time.Hour), expiry)
			if err != nil {
				t.Fatal(err)
			}
			app := startStampApp(t)
			s := secureKretry{broker: c.SSLAddrs()[0], tls: tlsYAML(c.TLS().CA, cert, key)}
			cfg := writeSecureConfig(t, s, "orders", app.url(), "")
			run := startKretryEnv(t, "run", nil, "run", "-c", cfg)
			cl := newClient(t, plain)
			a := seq("a"+name[:1], 4)
			produceValues(t, cl, a...)
			app.waitAcked(t, 60*time.Second, a, func() { run.mustRun(t) })
			if renew {
				if _, _, err := c.WriteClientCert(dir, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Until(expiry) + time.Second)
			if err := c.Restart(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			b := seq("b"+name[:1], 4)
			produceValues(t, newClient(t, plain), b...)
			if renew {
				app.waitAcked(t, 90*time.Second, b, func() { run.mustRun(t) })
				if code := run.stop(t, 20*time.Second); code != 0 {
					t.Errorf("exit %d after SIGTERM, want 0", code)
				}
				return
			}
			code := run.wait(t, 120*time.Second)
			out := run.stderr.String()
			if code != 1 || !strings.Contains(out, "TLS: the broker refused the client certificate") || !strings.Contains(out, "kafka.tls.cert_file") {
				t.Errorf("exit %d; want 1 with the refused client certificate and kafka.tls.cert_file named", code)
			}
		})
	}
}
