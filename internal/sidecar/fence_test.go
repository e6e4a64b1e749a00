package sidecar

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/engine"
)

// TestFenceHintNamesTheEmbeddedBroker: a fenced instance that serves the
// embedded broker says that the broker stops with it (the newer instance
// was dialing it); one on an external broker, or any other error, keeps
// the engine's words.
func TestFenceHintNamesTheEmbeddedBroker(t *testing.T) {
	fenced := fmt.Errorf("committing: %w", &engine.FencedError{InstanceID: "vm", TransactionalID: "kretry-vm-orders", Group: "orders-kretry", Err: kerr.ProducerFenced})
	embedded := &config.Config{Kafka: config.Kafka{Brokers: []string{config.Embedded}}, Embedded: config.Broker{Listen: "127.0.0.1:9092"}}
	external := &config.Config{Kafka: config.Kafka{Brokers: []string{"kafka:9092"}}}
	if got := withFenceHint(fenced, embedded).Error(); !strings.Contains(got, "also serves the embedded broker (kafka.brokers: [embedded], 127.0.0.1:9092), which stops with it") {
		t.Errorf("fenced, embedded broker: %q", got)
	}
	if got := withFenceHint(fenced, external); got != fenced {
		t.Errorf("fenced, external broker: %q, want the engine's error as it is", got)
	}
	other := errors.New("boom")
	if got := withFenceHint(other, embedded); got != other {
		t.Errorf("not fenced: %q, want the error as it is", got)
	}
	if !errors.Is(withFenceHint(fenced, embedded), engine.ErrFenced) {
		t.Error("the hint hides engine.ErrFenced")
	}
}
