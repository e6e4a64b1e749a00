package sidecar

import (
	"context"
	"fmt"
	"strings"
	"time"

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
	// Err is the last error of the attempt.
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

// PingTimeout bounds Ping.
const PingTimeout = 15 * time.Second

// Ping checks that one of the brokers answers a request (kgo.Client.Ping
// tries each seed broker once), at most PingTimeout. On failure it returns
// an *UnreachableError; embedded says the addresses are embedded.listen
// standing in for kafka.brokers [embedded].
func Ping(ctx context.Context, cl *kgo.Client, addrs []string, embedded bool) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		return &UnreachableError{Addrs: addrs, Embedded: embedded, Err: err}
	}
	return nil
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
