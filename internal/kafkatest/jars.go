package kafkatest

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"syscall"
)

// pom lists the broker and its logging binding; [Jars] resolves it.
//
//go:embed pom.xml
var pom []byte

// KafkaVersion is the Apache Kafka release the tests run (pom.xml's
// kafka.version; a test pins that the two agree).
const KafkaVersion = "4.1.1"

// ErrUnavailable is returned (wrapped, with what is missing) when java or
// mvn is not on PATH.
var ErrUnavailable = errors.New("real Kafka unavailable")

// Available reports nil when java and mvn are on PATH, or an error wrapping
// ErrUnavailable that names what is missing and how to get it.
func Available() error {
	var missing []string
	for _, bin := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %v not on PATH (install a JDK 17 and Maven, e.g. apt-get install openjdk-17-jre-headless maven; .ci/run does)",
			ErrUnavailable, missing)
	}
	return nil
}

// CacheDir is where the jars are kept: $KRETRY_TEST_KAFKA_JARS, else
// $XDG_CACHE_HOME/kretry/kafka-<version>, else ~/.cache/kretry/kafka-<version>.
func CacheDir() (string, error) {
	if d := os.Getenv("KRETRY_TEST_KAFKA_JARS"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kafkatest: no cache folder (set KRETRY_TEST_KAFKA_JARS): %w", err)
	}
	return filepath.Join(base, "kretry", "kafka-"+KafkaVersion), nil
}

var jarsOnce struct {
	sync.Once
	dir string
	err error
}

// Jars returns the folder holding the broker's jars, fetching them with
// Maven the first time. Concurrent callers in other processes (go test runs
// packages in parallel) wait on a file lock instead of fetching twice.
func Jars() (string, error) {
	jarsOnce.Do(func() { jarsOnce.dir, jarsOnce.err = fetchJars() })
	return jarsOnce.dir, jarsOnce.err
}

func fetchJars() (string, error) {
	if err := Available(); err != nil {
		return "", err
	}
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	done := filepath.Join(dir, ".complete")
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("kafkatest: lock %s: %w", lock.Name(), err)
	}
	if _, err := os.Stat(done); err == nil {
		return dir, nil // fetched by another process while we waited
	}
	pomFile := filepath.Join(dir, "pom.xml")
	if err := os.WriteFile(pomFile, pom, 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	cmd := exec.Command("mvn", "-q", "-B", "-f", pomFile, "dependency:copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory="+filepath.Join(dir, "lib"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kafkatest: fetching Kafka %s with Maven (%s): %w\n%s", KafkaVersion, cmd, err, out)
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	return dir, nil
}
