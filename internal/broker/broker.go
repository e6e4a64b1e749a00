// Package broker runs the embedded Kafka-protocol broker: franz-go's kfake,
// in-process, listening on a loopback address and persisting its log under a
// data directory. It backs `kafka.brokers: [embedded]`, `kretry broker` and
// `kretry demo`, so that a newcomer needs no cluster; it is not meant for
// production data.
package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Config configures the embedded broker.
type Config struct {
	// Listen is host:port; port 0 picks a free port. The host is also the
	// address advertised to clients, so it must be one they can dial
	// (127.0.0.1 by default).
	Listen string
	// ListenFrom is where Listen came from ("embedded.listen",
	// "--listen"), named in the errors about it; "" says "listen".
	ListenFrom string
	// DataDir persists the log across restarts; "" keeps it in memory.
	// One broker at a time may use it (Start locks it).
	DataDir string
	// Partitions is the partition count of auto-created topics.
	Partitions int32
	// Logger receives the broker's warnings and errors; nil discards them.
	Logger *slog.Logger
	// Opts are further kfake options (tests shorten group timeouts).
	Opts []kfake.Opt
}

// Broker is a running embedded broker.
type Broker struct {
	c    *kfake.Cluster
	lock *dirLock // nil without a data dir
}

// Start starts the broker. With a data dir it first locks the dir (the
// file kretry.lock in it, holding the PID) for as long as the broker runs;
// it returns a *LockedError (errors.Is ErrLocked) naming the dir and the
// holder's PID when another process has it. It also returns an error when
// the address cannot be bound (for example "address already in use") or
// the data dir cannot be read.
func Start(cfg Config) (*Broker, error) {
	from := cfg.ListenFrom
	if from == "" {
		from = "listen"
	}
	host, portStr, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %s %q: %w", from, cfg.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %s %q: port is not a number", from, cfg.Listen)
	}
	var listenErr error // the bind's own error, to name where the address came from
	if host == "" {
		host = "127.0.0.1"
	}
	parts := cfg.Partitions
	if parts < 1 {
		parts = 1
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			ln, err := net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
			if err != nil {
				listenErr = err
			}
			return ln, err
		}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(parts)),
		kfake.ClusterID("kretry-embedded"),
	}
	opts = append(opts, cfg.Opts...)
	if cfg.Logger != nil {
		opts = append(opts, kfake.WithLogger(slogLogger{cfg.Logger}))
	}
	var lock *dirLock
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("embedded broker: data dir: %w", err)
		}
		if lock, err = lockDir(cfg.DataDir); err != nil {
			return nil, err
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		lock.release()
		if listenErr != nil {
			return nil, bindError(from, cfg.Listen, listenErr)
		}
		return nil, fmt.Errorf("embedded broker on %s: %w", cfg.Listen, err)
	}
	return &Broker{c: c, lock: lock}, nil
}

// bindError names the key the address came from (from) and, when another
// process holds the address, what to do about it.
func bindError(from, listen string, err error) error {
	hint := ""
	if errors.Is(err, syscall.EADDRINUSE) {
		hint = fmt.Sprintf(" (another process listens there, often another kretry run or kretry broker: stop it, or set %s to a free host:port)", from)
	}
	return fmt.Errorf("embedded broker: %s %s: %w%s", from, listen, err, hint)
}

// Addrs returns the host:port addresses clients bootstrap from.
func (b *Broker) Addrs() []string { return b.c.ListenAddrs() }

// Cluster exposes the kfake cluster, for tests that inject faults.
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// Close stops the broker, flushes its data dir and unlocks it.
func (b *Broker) Close() {
	b.c.Close()
	b.lock.release()
}

type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Logf(level kfake.LogLevel, msg string, args ...any) {
	switch level {
	case kfake.LogLevelError:
		s.l.Error(fmt.Sprintf(msg, args...), "component", "embedded-broker")
	case kfake.LogLevelWarn:
		s.l.Warn(fmt.Sprintf(msg, args...), "component", "embedded-broker")
	}
}
