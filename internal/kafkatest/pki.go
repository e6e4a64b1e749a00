package kafkatest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles are the PEM files of a cluster's test PKI: one CA, which signs
// the brokers' certificate and a client certificate.
type TLSFiles struct {
	// CA is the CA certificate (kafka.tls.ca_file for a client).
	CA string
	// ClientCert and ClientKey are a client certificate signed by CA
	// (CN=kafkatest-client, extended key usage client auth) and its
	// unencrypted PKCS #8 key: what the SSL listener, which requires a
	// client certificate, accepts.
	ClientCert, ClientKey string
	// brokerKeyStore holds the brokers' key and certificate chain in one
	// file (ssl.keystore.type=PEM, ssl.keystore.location).
	brokerKeyStore string
}

// ca is a certificate authority that can sign leaf certificates.
type ca struct {
	cert *x509.Certificate
	der  []byte
	key  crypto.Signer
}

// newCA makes a self-signed ECDSA P-256 CA named cn, valid for a day.
func newCA(cn string) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"kretry tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, der: der, key: key}, nil
}

// leaf signs a new ECDSA P-256 certificate for cn. server certificates
// name 127.0.0.1, ::1 and localhost and may serve and dial (the brokers);
// the others may only dial.
func (a *ca) leaf(cn string, server bool) (certDER []byte, key *ecdsa.PrivateKey, err error) {
	return a.leafValid(cn, server, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// leafValid is leaf with the validity period [notBefore, notAfter].
func (a *ca) leafValid(cn string, server bool, notBefore, notAfter time.Time) (certDER []byte, key *ecdsa.PrivateKey, err error) {
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"kretry tests"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	}
	certDER, err = x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	return certDER, key, err
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// pemKey encodes key as unencrypted PKCS #8 ("PRIVATE KEY"), the form
// both Kafka's PEM key store and crypto/tls read.
func pemKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// writePKI makes a CA, a broker certificate and a client certificate and
// writes them under dir.
func writePKI(dir string) (TLSFiles, *ca, error) {
	f := TLSFiles{
		CA:             filepath.Join(dir, "ca.pem"),
		ClientCert:     filepath.Join(dir, "client.pem"),
		ClientKey:      filepath.Join(dir, "client-key.pem"),
		brokerKeyStore: filepath.Join(dir, "broker-keystore.pem"),
	}
	fail := func(err error) (TLSFiles, *ca, error) {
		return TLSFiles{}, nil, fmt.Errorf("kafkatest: test PKI: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	a, err := newCA("kafkatest CA")
	if err != nil {
		return fail(err)
	}
	brokerDER, brokerKey, err := a.leaf("kafkatest-broker", true)
	if err != nil {
		return fail(err)
	}
	clientDER, clientKey, err := a.leaf("kafkatest-client", false)
	if err != nil {
		return fail(err)
	}
	bk, err := pemKey(brokerKey)
	if err != nil {
		return fail(err)
	}
	ck, err := pemKey(clientKey)
	if err != nil {
		return fail(err)
	}
	for _, w := range []struct {
		path string
		b    []byte
	}{
		{f.CA, pemCert(a.der)},
		// Key first, then the chain (leaf, CA): Kafka's PEM key store.
		{f.brokerKeyStore, append(append(bk, pemCert(brokerDER)...), pemCert(a.der)...)},
		{f.ClientCert, pemCert(clientDER)},
		{f.ClientKey, ck},
	} {
		if err := os.WriteFile(w.path, w.b, 0o600); err != nil {
			return fail(err)
		}
	}
	return f, a, nil
}

// WriteCAFile writes the certificate of a new self-signed CA, which signed
// nothing the brokers use, to dir/name and returns its path: for tests of
// a client that trusts the wrong CA.
func WriteCAFile(dir, name string) (string, error) {
	a, err := newCA("kafkatest unrelated CA")
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pemCert(a.der), 0o600); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	return path, nil
}

// WriteClientCert writes a client certificate signed by the cluster's CA,
// valid from notBefore to notAfter (in the past for an expired one), and
// its key to dir, and returns their paths: for tests of a certificate the
// brokers must refuse although they trust its CA.
func (c *Cluster) WriteClientCert(dir string, notBefore, notAfter time.Time) (cert, key string, err error) {
	if c.ca == nil {
		return "", "", fmt.Errorf("kafkatest: the cluster has no TLS listener (Config.Security)")
	}
	der, k, err := c.ca.leafValid("kafkatest-client", false, notBefore, notAfter)
	if err != nil {
		return "", "", fmt.Errorf("kafkatest: %w", err)
	}
	kb, err := pemKey(k)
	if err != nil {
		return "", "", fmt.Errorf("kafkatest: %w", err)
	}
	cert, key = filepath.Join(dir, "client-cert.pem"), filepath.Join(dir, "client-key.pem")
	if err := os.WriteFile(cert, pemCert(der), 0o600); err != nil {
		return "", "", fmt.Errorf("kafkatest: %w", err)
	}
	if err := os.WriteFile(key, kb, 0o600); err != nil {
		return "", "", fmt.Errorf("kafkatest: %w", err)
	}
	return cert, key, nil
}
