package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config shapes a cluster. The zero value is one node with test settings.
type Config struct {
	// Nodes is the number of combined broker+controller nodes: 1 or 3
	// (default 1). With 3, internal topics and new topics get replication
	// factor 3 and min.insync.replicas 2, so one node can be down.
	Nodes int
	// Props are broker properties set on every node, over the defaults
	// (see [DefaultProps]).
	Props map[string]string
	// JVMOpts replace the default JVM options, which favour start-up time
	// over peak throughput (benchmarks pass their own).
	JVMOpts []string
	// StartTimeout bounds the wait for every node to serve metadata
	// (default 90s).
	StartTimeout time.Duration
	// Security, when set, adds TLS and SASL listeners (see [Security]).
	Security *Security
}

// DefaultJVMOpts start a node quickly and small.
var DefaultJVMOpts = []string{"-Xms128m", "-Xmx768m", "-XX:+UseSerialGC",
	"-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Djava.awt.headless=true"}

// DefaultProps are the broker settings for tests on a cluster of n nodes:
// no initial rebalance delay, group session timeouts down to 100ms (as the
// embedded broker's tests use), few internal-topic partitions, replication
// that fits n, and a fast sweep of timed-out transactions.
func DefaultProps(n int) map[string]string {
	rf, isr := strconv.Itoa(n), strconv.Itoa(min(n, 2))
	return map[string]string{
		"group.initial.rebalance.delay.ms":                            "0",
		"group.min.session.timeout.ms":                                "100",
		"offsets.topic.replication.factor":                            rf,
		"offsets.topic.num.partitions":                                "10",
		"transaction.state.log.replication.factor":                    rf,
		"transaction.state.log.min.isr":                               isr,
		"transaction.state.log.num.partitions":                        "10",
		"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
		"default.replication.factor":                                  rf,
		"min.insync.replicas":                                         isr,
		"num.partitions":                                              "1",
		"auto.create.topics.enable":                                   "true",
	}
}

// Cluster is a running set of Kafka nodes.
type Cluster struct {
	cfg   Config
	jars  string
	dir   string
	id    string // cluster id, shared by the nodes' storage
	nodes []*node
	tls   TLSFiles // with cfg.Security
	ca    *ca      // signed tls's certificates (WriteClientCert)
}

// Start fetches the jars if needed, formats and starts cfg.Nodes nodes and
// waits until every one serves metadata. On error nothing is left running.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 1
	}
	if cfg.Nodes < 1 {
		return nil, fmt.Errorf("kafkatest: Nodes %d: want 1 or more", cfg.Nodes)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 90 * time.Second
	}
	if cfg.JVMOpts == nil {
		cfg.JVMOpts = DefaultJVMOpts
	}
	jars, err := Jars()
	if err != nil {
		return nil, err
	}
	// The ports are free when placeNodes asks, not when the JVM binds them
	// seconds later: another process (a test beside this one) may take one
	// in between, and the node exits with "Address already in use". Such a
	// start is tried again on new ports.
	for attempt := 1; ; attempt++ {
		c, err := start(ctx, cfg, jars)
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return c, err
		}
	}
}

// placed, when set (tests), is called once a start has placed its nodes
// on their ports, before they are launched.
var placed func(*Cluster)

// errPortTaken marks a start that failed because a node could not bind
// one of its ports.
var errPortTaken = errors.New("kafkatest: a node's port was taken before it bound it")

// start starts cfg's cluster once, from the jars in jars.
func start(ctx context.Context, cfg Config, jars string) (*Cluster, error) {
	dir, err := os.MkdirTemp("", "kafkatest-")
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	c := &Cluster{cfg: cfg, jars: filepath.Join(jars, "lib"), dir: dir, id: newClusterID()}
	if err := c.placeNodes(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if placed != nil {
		placed(c)
	}
	for _, step := range []func() error{
		c.setUpSecurity,
		func() error { return c.format(ctx) },
		c.launchAll,
		func() error { return c.waitReady(ctx, cfg.Nodes) },
		func() error { return c.warmCoordinators(ctx) },
		func() error { return c.createUsers(ctx) },
	} {
		if err := step(); err != nil {
			if c.portTaken() {
				err = fmt.Errorf("%w: %w", errPortTaken, err)
			}
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// placeNodes gives each of the cluster's nodes its id, its directory and
// its ports: client, controller, then SASL_SSL and SSL when configured.
func (c *Cluster) placeNodes() error {
	per := 2 + c.cfg.Security.ports()
	ports, err := freePorts(per * c.cfg.Nodes)
	if err != nil {
		return err
	}
	for i := range c.cfg.Nodes {
		n := &node{id: i + 1, port: ports[per*i], cport: ports[per*i+1],
			dir: filepath.Join(c.dir, "node"+strconv.Itoa(i+1))}
		next := per*i + 2
		if s := c.cfg.Security; s != nil && s.SASLSSL {
			n.saslPort, next = ports[next], next+1
		}
		if s := c.cfg.Security; s != nil && s.SSL {
			n.sslPort = ports[next]
		}
		c.nodes = append(c.nodes, n)
	}
	return nil
}

// launchAll starts every node's process.
func (c *Cluster) launchAll() error {
	for _, n := range c.nodes {
		if err := c.launch(n); err != nil {
			return err
		}
	}
	return nil
}

// warmCoordinators waits until a group and a transaction coordinator can be
// found, which creates __consumer_offsets and __transaction_state as a
// cluster in service has them. Without it a test's first group or
// transactional request meets COORDINATOR_NOT_AVAILABLE for a few seconds
// (the embedded broker has its coordinators at once).
func (c *Cluster) warmCoordinators(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		gerr := adm.FindGroupCoordinators(ctx, "kafkatest-warm-up").Error()
		terr := adm.FindTxnCoordinators(ctx, "kafkatest-warm-up").Error()
		if gerr == nil && terr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: coordinators not available after %v: groups: %v; transactions: %v",
				c.cfg.StartTimeout, gerr, terr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Addrs are the bootstrap addresses (host:port) of every node's PLAINTEXT
// listener (see [Cluster.SASLSSLAddrs] and [Cluster.SSLAddrs] for the
// secured ones).
func (c *Cluster) Addrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)))
	}
	return out
}

// Nodes is the number of nodes; node ids are 1..Nodes.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Kill sends SIGKILL to node id (1-based) and waits for it to exit. Killing
// a node that is not running does nothing.
func (c *Cluster) Kill(id int) error { return c.signal(id, syscall.SIGKILL, 0) }

// Terminate stops node id cleanly (SIGTERM: a controlled shutdown that
// moves its leaderships away first), killing it after 60s.
func (c *Cluster) Terminate(id int) error { return c.signal(id, syscall.SIGTERM, 60*time.Second) }

// Restart starts node id again on its ports and data (killing it first if
// it runs) and waits until the cluster reports all its nodes.
func (c *Cluster) Restart(ctx context.Context, id int) error {
	if err := c.Kill(id); err != nil {
		return err
	}
	n, _ := c.node(id)
	if err := c.launch(n); err != nil {
		return err
	}
	return c.waitReady(ctx, len(c.nodes))
}

// Running reports whether node id's process is alive.
func (c *Cluster) Running(id int) bool {
	n, err := c.node(id)
	if err != nil {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Stop kills every node and removes the cluster's data.
func (c *Cluster) Stop() {
	for _, n := range c.nodes {
		_ = c.Kill(n.id)
	}
	os.RemoveAll(c.dir)
}

// portTaken reports whether a node's log says it could not bind a port.
func (c *Cluster) portTaken() bool {
	for _, n := range c.nodes {
		if strings.Contains(c.LogTail(n.id, 1<<20), "Address already in use") {
			return true
		}
	}
	return false
}

// LogTail returns the last max bytes of node id's broker log.
func (c *Cluster) LogTail(id, max int) string {
	n, err := c.node(id)
	if err != nil {
		return err.Error()
	}
	b, err := os.ReadFile(filepath.Join(n.dir, "broker.log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

func (c *Cluster) node(id int) (*node, error) {
	if id < 1 || id > len(c.nodes) {
		return nil, fmt.Errorf("kafkatest: no node %d (the cluster has 1..%d)", id, len(c.nodes))
	}
	return c.nodes[id-1], nil
}

// waitReady waits until metadata from every running node lists want
// brokers, failing early when a node's process exits.
func (c *Cluster) waitReady(ctx context.Context, want int) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	for _, n := range c.nodes {
		if !c.Running(n.id) {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port))
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(time.Second))
		if err != nil {
			return fmt.Errorf("kafkatest: %w", err)
		}
		err = c.waitNode(ctx, kadm.NewClient(cl), n, want)
		cl.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) waitNode(ctx context.Context, adm *kadm.Client, n *node, want int) error {
	for {
		if !c.Running(n.id) {
			return fmt.Errorf("kafkatest: node %d exited while starting; its log ends:\n%s", n.id, c.LogTail(n.id, 4000))
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		bs, err := adm.ListBrokers(rctx)
		cancel()
		if err == nil && len(bs) >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: node %d not ready after %v (brokers seen %d of %d, last error %v); its log ends:\n%s",
				n.id, c.cfg.StartTimeout, len(bs), want, err, c.LogTail(n.id, 4000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePorts returns n distinct loopback ports free at the time of asking.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kafkatest: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// newClusterID is a random KRaft cluster id (16 bytes, base64url, no padding).
func newClusterID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// WaitTopics waits until every partition of topics has a leader that
// answers ListOffsets. Kafka creates a topic asynchronously: CreateTopics
// returns before its partitions are served, and a request sent at once may
// meet UNKNOWN_TOPIC_OR_PARTITION (the embedded broker serves them at once).
func WaitTopics(ctx context.Context, adm *kadm.Client, topics ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		offs, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			err = offs.Error()
		}
		if err == nil {
			ok := true
			for _, t := range topics {
				if len(offs[t]) == 0 {
					ok = false
				}
			}
			if ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: topics %v not served after 30s: %v", topics, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
