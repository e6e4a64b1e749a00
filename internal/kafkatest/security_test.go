package kafkatest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TestSecuredListeners starts one node with a SASL_SSL (SCRAM-SHA-512)
// and an SSL (client certificate required) listener: a record produced
// over one is read back over the other; a wrong password and a missing
// client certificate are refused.
func TestSecuredListeners(t *testing.T) {
	c := New(t, Config{Security: &Security{SASLSSL: true, SSL: true, Users: map[string]string{"alice": "alice-secret"}}})
	ctx := context.Background()
	if len(c.SASLSSLAddrs()) != 1 || len(c.SSLAddrs()) != 1 || c.TLS().CA == "" {
		t.Fatalf("SASLSSLAddrs %v, SSLAddrs %v, TLS %+v: want one of each", c.SASLSSLAddrs(), c.SSLAddrs(), c.TLS())
	}
	serverOnly, err := c.ClientTLS(false)
	if err != nil {
		t.Fatal(err)
	}
	withCert, err := c.ClientTLS(true)
	if err != nil {
		t.Fatal(err)
	}
	newClient := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append(opts, kgo.DialTimeout(5*time.Second))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	sasl := func(pass string) kgo.Opt { return kgo.SASL(scram.Auth{User: "alice", Pass: pass}.AsSha512Mechanism()) }

	saslCl := newClient(kgo.SeedBrokers(c.SASLSSLAddrs()...), kgo.DialTLSConfig(serverOnly), sasl("alice-secret"))
	if _, err := kadm.NewClient(saslCl).CreateTopic(ctx, 1, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	if err := WaitTopics(ctx, kadm.NewClient(saslCl), "t"); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := saslCl.ProduceSync(pctx, &kgo.Record{Topic: "t", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal("produce over SASL_SSL:", err)
	}
	sslCl := newClient(kgo.SeedBrokers(c.SSLAddrs()...), kgo.DialTLSConfig(withCert),
		kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for {
		fs := sslCl.PollFetches(pctx)
		if err := pctx.Err(); err != nil {
			t.Fatal("nothing read back over SSL:", err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			if string(recs[0].Value) != "v" {
				t.Fatalf("read %q, want v", recs[0].Value)
			}
			break
		}
	}

	ping := func(cl *kgo.Client) error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	err = ping(newClient(kgo.SeedBrokers(c.SASLSSLAddrs()...), kgo.DialTLSConfig(serverOnly), sasl("wrong")))
	if !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Errorf("a wrong password: %v, want %v", err, kerr.SaslAuthenticationFailed)
	} else {
		t.Logf("wrong password: %v", err)
	}
	err = ping(newClient(kgo.SeedBrokers(c.SSLAddrs()...), kgo.DialTLSConfig(serverOnly)))
	if err == nil {
		t.Error("the SSL listener accepted a client without a certificate")
	} else {
		t.Logf("no client certificate: %v", err)
	}
}
