package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The Spring Kafka peers' Maven project (spring/: pom.xml and the Java
// sources). It is built in a cache folder, not in the repository.
//
//go:embed spring/pom.xml spring/src
var springProject embed.FS

// springJVMOpts are the peers' JVM options: a 1 GiB heap limit and G1
// (the JVM's own choice on this machine, named so that it does not
// depend on the machine); nothing tuned.
var springJVMOpts = []string{"-Xmx1g", "-XX:+UseG1GC", "-Djava.awt.headless=true"}

// springAvailable reports nil when java, javac and mvn are on PATH, or what
// is missing and how to get it.
func springAvailable() error {
	var missing []string
	for _, bin := range []string{"java", "javac", "mvn"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("Spring peers: %v not on PATH (a JDK 17+, not only a JRE, and Maven: apt-get install openjdk-17-jdk-headless maven)", missing)
	}
	return nil
}

// springBuild returns the folder of the built Spring peers (target/classes
// and lib/), compiling them with Maven the first time for these sources:
// ~/.cache/kretry/bench-spring-<hash of the project files>. The first build
// fetches spring-kafka and its dependencies (about 15 MB) from Maven
// Central.
func springBuild() (string, error) {
	if err := springAvailable(); err != nil {
		return "", err
	}
	h := sha256.New()
	var files []string
	err := fs.WalkDir(springProject, "spring", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	slices.Sort(files)
	for _, f := range files {
		b, _ := springProject.ReadFile(f)
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("Spring peers: no cache folder: %w", err)
	}
	dir := filepath.Join(base, "kretry", "bench-spring-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir, nil
	}
	for _, f := range files {
		b, _ := springProject.ReadFile(f)
		dst := filepath.Join(dir, strings.TrimPrefix(f, "spring/"))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(os.Stderr, "building the Spring peers with Maven in %s … ", dir)
	cmd := exec.Command("mvn", "-q", "-B", "-f", filepath.Join(dir, "pom.xml"), "compile",
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+filepath.Join(dir, "lib"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("Spring peers: %s: %w\n%s", cmd, err, out)
	}
	fmt.Fprintln(os.Stderr, "done")
	return dir, os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644)
}

// startSpring returns the start func of a Spring peer: mode "retry-topic"
// (non-blocking retries: retry topics + DLT) or "blocking"
// (DefaultErrorHandler + DeadLetterPublishingRecoverer). The peer is a JVM
// subprocess; it runs the application logic itself (App.java, the same as
// app.handle) and streams each decision back (events), which this side
// books as for the Go peers. Its CPU is the JVM's, read from
// /proc/<pid>/stat.
func startSpring(mode string) func(ctx context.Context, e *env) (func(), error) {
	return func(ctx context.Context, e *env) (func(), error) {
		dir, err := springBuild()
		if err != nil {
			return nil, err
		}
		classes, err := os.CreateTemp("", "bench-classes-")
		if err != nil {
			return nil, err
		}
		defer os.Remove(classes.Name()) // read by the JVM before it says ready
		if _, err := classes.Write(e.a.p.classes); err != nil {
			return nil, err
		}
		classes.Close()
		var backoff []string
		for _, t := range e.tiers {
			backoff = append(backoff, strconv.FormatInt(t.Milliseconds(), 10))
		}
		level := "error"
		if e.verbose {
			level = "warn"
		}
		args := append(slices.Clone(springJVMOpts), "-Dorg.slf4j.simpleLogger.defaultLogLevel="+level,
			"-cp", filepath.Join(dir, "target", "classes")+string(os.PathListSeparator)+filepath.Join(dir, "lib", "*"),
			"io.kretry.bench.Main", "mode="+mode, "brokers="+strings.Join(e.addrs, ","), "topic="+e.topic,
			"group="+e.group, "partitions="+strconv.Itoa(e.partitions), "classes="+classes.Name(),
			"fetch-max-wait-ms="+strconv.FormatInt(e.fetchWait.Milliseconds(), 10), "backoff-ms="+strings.Join(backoff, ","))
		return runJVM(e, args)
	}
}

// runJVM starts the peer's JVM, waits for its "ready" line and returns its
// stop func (close stdin, wait up to 30s, then kill).
func runJVM(e *env, args []string) (func(), error) {
	cmd := exec.Command("java", args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the Spring peer: %w", err)
	}
	e.peerPID.Store(int64(cmd.Process.Pid))
	ready := make(chan struct{})
	var tail atomic.Pointer[string]
	stderrDone := make(chan struct{})
	go func() { watchStderr(stderr, ready, &tail, e.verbose); close(stderrDone) }()
	// Wait closes the pipes: it may run only once both streams are read
	// to their end (os/exec).
	var eventsErr error
	exited := make(chan error, 1)
	go func() {
		eventsErr = readEvents(stdout, e.a)
		_, _ = io.Copy(io.Discard, stdout) // after a bad frame, keep the JVM from blocking on a full pipe
		<-stderrDone
		exited <- cmd.Wait()
	}()
	stop := func() {
		e.peerRSS.Store(procPeakRSS(cmd.Process.Pid))
		e.peerJIT.Store(int64(jitCPU(cmd.Process.Pid)))
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if eventsErr != nil {
			e.log.Error("Spring peer events", "err", eventsErr)
		}
	}
	select {
	case <-ready:
		return stop, nil
	case err := <-exited:
		msg := ""
		if t := tail.Load(); t != nil {
			msg = *t
		}
		return nil, fmt.Errorf("the Spring peer exited before it was ready (%v):\n%s", err, msg)
	case <-time.After(90 * time.Second):
		stop()
		return nil, errors.New("the Spring peer was not ready within 90s")
	}
}

// watchStderr closes ready at the peer's "ready" line and keeps the last
// lines for an error message (printing them with -v).
func watchStderr(r io.Reader, ready chan struct{}, tail *atomic.Pointer[string], verbose bool) {
	sc := bufio.NewScanner(r)
	var last []string
	once := false
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" && !once {
			once = true
			close(ready)
			continue
		}
		if verbose {
			fmt.Fprintln(os.Stderr, "spring:", line)
		}
		last = append(last, line)
		if len(last) > 40 {
			last = last[1:]
		}
		s := strings.Join(last, "\n")
		tail.Store(&s)
	}
}

// readEvents books the Java application's decisions (Events.java: 13-byte
// frames, kind, int32 record index, int64 Unix ns) until the stream ends.
func readEvents(r io.Reader, a *app) error {
	br := bufio.NewReaderSize(r, 1<<16)
	var f [13]byte
	for {
		if _, err := io.ReadFull(br, f[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		i, t := int(binary.BigEndian.Uint32(f[1:5])), int64(binary.BigEndian.Uint64(f[5:]))
		if i < 0 || i >= len(a.calls) {
			return fmt.Errorf("event for record %d: out of range", i)
		}
		switch f[0] {
		case 'C':
			a.call(i, t)
		case 'T':
			a.failedAt[i].Store(t)
		case 'P':
			a.settle(i, t)
		case 'A':
			a.ack(i, t)
		default:
			return fmt.Errorf("event kind %q: unknown", f[0])
		}
	}
}

// jitCPU is the CPU time the JVM's JIT compiler threads (C1 and C2
// CompilerThread…) have used since it started, from /proc/<pid>/task: the
// share of a short run's JVM CPU that a long-running service pays once.
func jitCPU(pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, t := range tasks {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, t.Name()))
		if err != nil || !strings.Contains(string(comm), "CompilerThre") {
			continue
		}
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			total += procCPU(tid) // /proc/<tid>/stat is the thread's own
		}
	}
	return total
}

// procPeakRSS is process pid's peak resident set size in bytes (VmHWM in
// /proc/<pid>/status), 0 when it cannot be read.
func procPeakRSS(pid int) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
