package sidecar

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/config"
)

// TestClassifyRefusedClientCertificate: the alerts a broker sends about
// the client's certificate, in crypto/tls's words, are "the broker refused
// the client certificate". Java answers an expired certificate signed by a
// CA it trusts with certificate_unknown, which crypto/tls prints "unknown
// certificate": that was the generic "TLS handshake failed". An expired
// local certificate is named with its date.
func TestClassifyRefusedClientCertificate(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	k := &config.Kafka{ClientID: "kretry"}
	k.TLS.Enabled, k.TLS.CertFile, k.TLS.KeyFile = true, cert, key
	c, err := NewClients(k, []string{"127.0.0.1:9094"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, alert := range []string{"unknown certificate", "expired certificate", "bad certificate", "revoked certificate"} {
		se := c.sec.classify("127.0.0.1:9094", "kafka.brokers", errors.New("remote error: tls: "+alert))
		if se == nil || se.What != "TLS: the broker refused the client certificate" {
			t.Errorf("alert %q: classified as %v, want the broker refused the client certificate", alert, se)
			continue
		}
		if !strings.Contains(se.Hint, "expired on") || !strings.Contains(se.Hint, cert) {
			t.Errorf("alert %q: hint %q does not say that %s expired", alert, se.Hint, cert)
		}
	}
}

func writeCert(t *testing.T, dir string, notBefore, notAfter time.Time) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client"},
		NotBefore: notBefore, NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, k.Public(), k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestClientCertificateReloaded: a client certificate renewed on disk is
// the one the next handshake presents; a pair that does not load (half
// written) keeps the last good one. Before, the pair was read once at
// start, and a renewed certificate took a restart.
func TestClientCertificateReloaded(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	k := &config.Kafka{ClientID: "kretry"}
	k.TLS.Enabled, k.TLS.CertFile, k.TLS.KeyFile = true, cert, key
	r, err := newCertReloader(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := r.get(nil)
	time.Sleep(10 * time.Millisecond) // a later modification time
	writeCert(t, dir, time.Now().Add(-time.Hour), time.Now().Add(48*time.Hour))
	second, _ := r.get(nil)
	if string(second.Certificate[0]) == string(first.Certificate[0]) {
		t.Fatal("the renewed certificate was not read")
	}
	if err := os.WriteFile(key, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	third, _ := r.get(nil)
	if string(third.Certificate[0]) != string(second.Certificate[0]) {
		t.Error("a pair that does not load replaced the last good one")
	}
	if _, err := ClientOpts(k, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("ClientOpts accepted a key file that does not load: the start must refuse it")
	}
}
