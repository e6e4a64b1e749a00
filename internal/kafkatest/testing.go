package kafkatest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// Kind names a broker the correctness suites run on.
type Kind string

const (
	// Embedded is kretry's embedded broker (franz-go's kfake, internal/broker).
	Embedded Kind = "embedded"
	// Kafka is Apache Kafka started by this package.
	Kafka Kind = "kafka"
)

// EnvBroker selects the brokers: embedded, kafka or both (the default).
const EnvBroker = "KRETRY_TEST_BROKER"

// Kinds returns the brokers selected by $KRETRY_TEST_BROKER.
func Kinds() ([]Kind, error) {
	switch v := strings.TrimSpace(os.Getenv(EnvBroker)); v {
	case "", "both":
		return []Kind{Embedded, Kafka}, nil
	case string(Embedded):
		return []Kind{Embedded}, nil
	case string(Kafka):
		return []Kind{Kafka}, nil
	default:
		return nil, fmt.Errorf("%s=%q: want embedded, kafka or both", EnvBroker, v)
	}
}

// RunMain runs the package's tests once per selected broker, calling use
// before each pass so the package's helpers start that broker. Where real
// Kafka is unavailable its pass is skipped with one line saying why, except
// under CI=true, where that is a failure: CI must prove both.
func RunMain(m *testing.M, use func(Kind)) int {
	kinds, err := Kinds()
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkatest:", err)
		return 2
	}
	code := 0
	for _, k := range kinds {
		if k == Kafka {
			if _, err := Jars(); err != nil {
				if os.Getenv("CI") == "true" {
					fmt.Fprintln(os.Stderr, "kafkatest: the real-Kafka pass cannot run under CI:", err)
					return 1
				}
				fmt.Printf("SKIP real-Kafka pass: %v\n", err)
				continue
			}
		}
		if len(kinds) > 1 {
			fmt.Printf("=== broker: %s\n", k)
		}
		use(k)
		if c := m.Run(); c != 0 {
			code = c
		}
	}
	return code
}

// New starts a cluster for the test and stops it when the test ends; on
// failure it skips (real Kafka unavailable outside CI) or fails the test.
// When the test fails, each node's log tail goes to the test log.
func New(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if err := Available(); err != nil && os.Getenv("CI") != "true" {
		t.Skip(err)
	}
	c, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for id := 1; id <= c.Nodes(); id++ {
				t.Logf("kafka node %d log tail:\n%s", id, c.LogTail(id, 3000))
			}
		}
		c.Stop()
	})
	return c
}
