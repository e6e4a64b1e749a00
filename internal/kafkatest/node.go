package kafkatest

// A node's config files and process: written, formatted, launched,
// signalled.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// node is one Kafka process of the cluster (broker and controller both),
// its ports and its directory.
type node struct {
	id          int // node.id, 1-based
	port, cport int // client and controller listener ports
	// saslPort and sslPort are the SASL_SSL and SSL listener ports, 0
	// without them (Config.Security).
	saslPort, sslPort int
	dir               string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// signal sends sig to node id and waits for it to exit, sending SIGKILL
// after grace (0: wait as long as it takes).
func (c *Cluster) signal(id int, sig syscall.Signal, grace time.Duration) error {
	n, err := c.node(id)
	if err != nil {
		return err
	}
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	if grace > 0 {
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	<-done
	n.mu.Lock()
	n.cmd = nil
	n.mu.Unlock()
	return nil
}

// props is node n's server.properties.
func (c *Cluster) props(n *node) map[string]string {
	var voters []string
	for _, o := range c.nodes {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", o.id, o.cport))
	}
	p := DefaultProps(len(c.nodes))
	maps.Copy(p, map[string]string{
		"process.roles":                  "broker,controller",
		"node.id":                        strconv.Itoa(n.id),
		"controller.quorum.voters":       strings.Join(voters, ","),
		"listeners":                      fmt.Sprintf("PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", n.port, n.cport),
		"advertised.listeners":           fmt.Sprintf("PLAINTEXT://127.0.0.1:%d", n.port),
		"controller.listener.names":      "CONTROLLER",
		"inter.broker.listener.name":     "PLAINTEXT",
		"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
		"log.dirs":                       filepath.Join(n.dir, "data"),
	})
	c.securityProps(n, p)
	maps.Copy(p, c.cfg.Props)
	return p
}

// writeConfig writes node n's server.properties and log4j2.properties
// (its broker log, broker.log, in n.dir) and returns the path of the
// former.
func (c *Cluster) writeConfig(n *node) (string, error) {
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	p := c.props(n)
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "%s=%s\n", k, p[k])
	}
	file := filepath.Join(n.dir, "server.properties")
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	log4j := fmt.Sprintf(`status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = %s
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%%d] %%p %%m (%%c)%%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka.request.logger
logger.kafka.level = WARN
`, filepath.Join(n.dir, "broker.log"))
	if err := os.WriteFile(filepath.Join(n.dir, "log4j2.properties"), []byte(log4j), 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	return file, nil
}

// format writes every node's storage (kafka-storage.sh format), in parallel.
func (c *Cluster) format(ctx context.Context) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		file, err := c.writeConfig(n)
		if err != nil {
			return err
		}
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, "java", append(c.jvm(n), "kafka.tools.StorageTool",
				"format", "--cluster-id="+c.id, "--config", file)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("kafkatest: formatting node %d: %w\n%s", n.id, err, out)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// jvm is the java command line of node n up to the main class: the JVM
// options, its log4j2 config and the jars' class path.
func (c *Cluster) jvm(n *node) []string {
	args := slices.Clone(c.cfg.JVMOpts)
	return append(args, "-Dlog4j2.configurationFile="+filepath.Join(n.dir, "log4j2.properties"),
		"-cp", filepath.Join(c.jars, "*"))
}

// launch starts node n's process.
func (c *Cluster) launch(n *node) error {
	file := filepath.Join(n.dir, "server.properties")
	cmd := exec.Command("java", append(c.jvm(n), "kafka.Kafka", file)...)
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// The node dies with the test binary, even on a crash or a timeout.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("kafkatest: starting node %d: %w", n.id, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(done)
	}()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return nil
}
