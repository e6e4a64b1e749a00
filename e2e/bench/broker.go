package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kretry/kretry/internal/broker"
)

// benchBroker is one embedded broker (internal/broker, kfake, in memory) for one
// run. By default it runs in a child process of this binary, so that the
// CPU figures of the peers (getrusage of this process) do not include the
// broker's own work; its CPU is read from /proc/<pid>/stat and reported
// apart. With -inproc-broker it runs in this process and its CPU is
// counted with the peer's.
type benchBroker struct {
	addrs []string
	// topic is the source topic of the run: a fresh name per run, so that
	// runs on one Kafka cluster never share a topic, group or
	// transactional id.
	topic string
	cmd   *exec.Cmd
	pid   int    // the Kafka node's JVM (site kafka); 0 otherwise
	done  func() // site kafka: deletes the run's topics
	stdin io.WriteCloser
	out   *bufio.Reader
	in    *broker.Broker
	w     *fetchWatch // in-process only
}

// fetchWatch records when the broker first receives a Fetch request that
// asks for a watched topic: the moment a peer starts reading the source
// (after its group join and, for kretry, after its parking restore). It
// observes only; the broker handles every request as usual.
type fetchWatch struct {
	mu    sync.Mutex
	name  string
	id    [16]byte
	first int64 // Unix ns; 0 until seen
}

func (w *fetchWatch) install(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f, ok := req.(*kmsg.FetchRequest)
		if !ok {
			return nil, nil, false
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.first != 0 || w.name == "" {
			return nil, nil, false
		}
		for _, t := range f.Topics {
			if t.Topic == w.name || (t.TopicID == w.id && t.TopicID != [16]byte{}) {
				if len(t.Partitions) > 0 {
					w.first = time.Now().UnixNano()
				}
				break
			}
		}
		return nil, nil, false
	})
}

func (w *fetchWatch) watch(name string, id [16]byte) {
	w.mu.Lock()
	w.name, w.id, w.first = name, id, 0
	w.mu.Unlock()
}

func (w *fetchWatch) firstFetch() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// serveBroker is the child side: start the broker, print its address, then
// answer commands on stdin until it closes:
//
//	watch <topic> <topic id hex>   start watching fetches of topic
//	first                          print the Unix ns of the first such fetch (0: none yet)
func serveBroker(partitions int) error {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: int32(partitions)})
	if err != nil {
		return err
	}
	defer b.Close()
	var w fetchWatch
	w.install(b.Cluster())
	fmt.Println(strings.Join(b.Addrs(), ","))
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "watch":
			var id [16]byte
			if raw, err := hex.DecodeString(f[2]); err == nil && len(raw) == 16 {
				copy(id[:], raw)
			}
			w.watch(f[1], id)
		case len(f) == 1 && f[0] == "first":
			fmt.Println(w.firstFetch())
		}
	}
	return nil
}

func startBroker(inproc bool, partitions int) (*benchBroker, error) {
	if inproc {
		b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: int32(partitions)})
		if err != nil {
			return nil, err
		}
		w := &fetchWatch{}
		w.install(b.Cluster())
		return &benchBroker{addrs: b.Addrs(), in: b, w: w}, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-serve-broker", "-partitions", strconv.Itoa(partitions))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("broker child: %w", err)
	}
	return &benchBroker{addrs: strings.Split(strings.TrimSpace(line), ","), cmd: cmd, stdin: stdin, out: out}, nil
}

// watch starts watching the first fetch of topic (see fetchWatch); on
// Kafka it does nothing (firstFetch then reports 0 and the window opens at
// the first delivery).
func (b *benchBroker) watch(topic string, id [16]byte) error {
	if b.done != nil {
		return nil
	}
	if b.w != nil {
		b.w.watch(topic, id)
		return nil
	}
	_, err := fmt.Fprintf(b.stdin, "watch %s %s\n", topic, hex.EncodeToString(id[:]))
	return err
}

// firstFetch is the Unix ns of the first fetch of the watched topic, 0 if
// none was seen.
func (b *benchBroker) firstFetch() int64 {
	if b.done != nil {
		return 0
	}
	if b.w != nil {
		return b.w.firstFetch()
	}
	if _, err := fmt.Fprintln(b.stdin, "first"); err != nil {
		return 0
	}
	line, err := b.out.ReadString('\n')
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
	return n
}

// cpu returns the broker's CPU time so far (user + system); 0 when it
// runs in this process.
func (b *benchBroker) cpu() time.Duration {
	switch {
	case b.pid != 0:
		return procCPU(b.pid)
	case b.cmd != nil:
		return procCPU(b.cmd.Process.Pid)
	}
	return 0
}

// procCPU is process pid's CPU time so far (user + system), from
// /proc/<pid>/stat at clock-tick (10ms) resolution; 0 when it cannot be
// read.
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which is in parentheses and may hold
	// spaces): state is field 3, utime 14, stime 15 (proc(5)).
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// clockTicks is sysconf(_SC_CLK_TCK), 100 on Linux for every architecture
// Go supports.
const clockTicks = 100

func (b *benchBroker) close() {
	if b.done != nil {
		b.done()
		return
	}
	if b.in != nil {
		b.in.Close()
		return
	}
	_ = b.stdin.Close()
	done := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-done
	}
}
