package kafkatest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Security adds secured client listeners to every node, beside the
// PLAINTEXT one, which the controller and inter-broker traffic keep using
// (and tests may too, to set up and check what they need without
// credentials). The brokers' certificate is signed by a CA made for the
// cluster ([Cluster.TLS]); it names 127.0.0.1, ::1 and localhost.
type Security struct {
	// SASLSSL adds a SASL_SSL listener ([Cluster.SASLSSLAddrs]) that
	// accepts SCRAM-SHA-512, and no client certificate.
	SASLSSL bool
	// SSL adds an SSL listener ([Cluster.SSLAddrs]) that requires a client
	// certificate signed by the cluster's CA (ssl.client.auth=required).
	SSL bool
	// Users are SCRAM-SHA-512 credentials (user name → password), created
	// through the admin API (AlterUserSCRAMs on the PLAINTEXT listener)
	// once the cluster is up; Start returns when the SASL_SSL listener
	// accepts each of them.
	Users map[string]string
}

// Listener names (each also its security protocol).
const (
	listenerSASLSSL = "SASL_SSL"
	listenerSSL     = "SSL"
)

// scramIterations is the SCRAM iteration count of [Security.Users]: 4096,
// the minimum Kafka accepts (RFC 7677 recommends it as the minimum too).
const scramIterations = 4096

// SASLSSLAddrs are the SASL_SSL (SCRAM-SHA-512) addresses of every node;
// nil without [Security.SASLSSL].
func (c *Cluster) SASLSSLAddrs() []string {
	return c.addrsOf(func(n *node) int { return n.saslPort })
}

// SSLAddrs are the SSL addresses (client certificate required) of every
// node; nil without [Security.SSL].
func (c *Cluster) SSLAddrs() []string {
	return c.addrsOf(func(n *node) int { return n.sslPort })
}

func (c *Cluster) addrsOf(port func(*node) int) []string {
	var out []string
	for _, n := range c.nodes {
		if p := port(n); p != 0 {
			out = append(out, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		}
	}
	return out
}

// TLS returns the paths of the cluster's PEM files; zero without
// [Config.Security].
func (c *Cluster) TLS() TLSFiles { return c.tls }

// ClientTLS is a TLS configuration that trusts the cluster's CA and, with
// clientCert, presents the client certificate ([TLSFiles.ClientCert]).
func (c *Cluster) ClientTLS(clientCert bool) (*tls.Config, error) {
	if c.tls.CA == "" {
		return nil, fmt.Errorf("kafkatest: the cluster has no TLS listener (Config.Security)")
	}
	b, err := os.ReadFile(c.tls.CA)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if clientCert {
		cert, err := tls.LoadX509KeyPair(c.tls.ClientCert, c.tls.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("kafkatest: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// ports is how many client ports beyond PLAINTEXT a node needs.
func (s *Security) ports() int {
	if s == nil {
		return 0
	}
	n := 0
	if s.SASLSSL {
		n++
	}
	if s.SSL {
		n++
	}
	return n
}

// securityProps are the broker properties of the secured listeners of
// node n, merged into props; listeners and advertised are the PLAINTEXT
// and CONTROLLER entries, extended here.
func (c *Cluster) securityProps(n *node, p map[string]string) {
	s := c.cfg.Security
	if s.ports() == 0 {
		return
	}
	protos := "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
	add := func(name string, port int) {
		l := fmt.Sprintf(",%s://127.0.0.1:%d", name, port)
		p["listeners"] += l
		p["advertised.listeners"] += l
		protos += "," + name + ":" + name
	}
	if s.SASLSSL {
		add(listenerSASLSSL, n.saslPort)
		maps.Copy(p, map[string]string{
			"sasl.enabled.mechanisms":                               "SCRAM-SHA-512",
			"listener.name.sasl_ssl.sasl.enabled.mechanisms":        "SCRAM-SHA-512",
			"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
		})
	}
	if s.SSL {
		add(listenerSSL, n.sslPort)
		p["listener.name.ssl.ssl.client.auth"] = "required"
	}
	p["listener.security.protocol.map"] = protos
	// PEM files (KIP-651): the key store holds the key and the chain, the
	// trust store the CA, which client certificates must chain to.
	maps.Copy(p, map[string]string{
		"ssl.keystore.type":       "PEM",
		"ssl.keystore.location":   c.tls.brokerKeyStore,
		"ssl.truststore.type":     "PEM",
		"ssl.truststore.location": c.tls.CA,
		"ssl.enabled.protocols":   "TLSv1.2,TLSv1.3",
	})
}

// setUpSecurity writes the PKI (before the nodes are formatted).
func (c *Cluster) setUpSecurity() error {
	if c.cfg.Security.ports() == 0 {
		return nil
	}
	f, a, err := writePKI(filepath.Join(c.dir, "tls"))
	if err != nil {
		return err
	}
	c.tls, c.ca = f, a
	return nil
}

// createUsers creates the SCRAM users of cfg.Security and waits until the
// SASL_SSL listener accepts each.
func (c *Cluster) createUsers(ctx context.Context) error {
	s := c.cfg.Security
	if s == nil || len(s.Users) == 0 {
		return nil
	}
	if !s.SASLSSL {
		return fmt.Errorf("kafkatest: Security.Users without Security.SASLSSL: nothing would accept them")
	}
	for _, u := range slices.Sorted(maps.Keys(s.Users)) {
		if err := c.AddSCRAMUser(ctx, u, s.Users[u]); err != nil {
			return err
		}
	}
	return nil
}

// AddSCRAMUser creates (or updates) a SCRAM-SHA-512 user through the
// admin API on the PLAINTEXT listener and waits until the SASL_SSL
// listener of every node accepts it (credentials reach the brokers through
// the metadata log, a moment after the controller commits them).
func (c *Cluster) AddSCRAMUser(ctx context.Context, user, password string) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: user, Mechanism: kadm.ScramSha512, Iterations: scramIterations, Password: password,
	}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return fmt.Errorf("kafkatest: creating SCRAM user %q: %w", user, err)
	}
	tc, err := c.ClientTLS(false)
	if err != nil {
		return err
	}
	for _, addr := range c.SASLSSLAddrs() {
		if err := waitSCRAM(ctx, addr, tc, user, password); err != nil {
			return err
		}
	}
	return nil
}

func waitSCRAM(ctx context.Context, addr string, tc *tls.Config, user, password string) error {
	for {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(tc), kgo.DialTimeout(2*time.Second),
			kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha512Mechanism()))
		if err != nil {
			return fmt.Errorf("kafkatest: %w", err)
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = cl.Ping(pctx)
		cancel()
		cl.Close()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: SCRAM user %q not accepted at %s: %w", user, addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
