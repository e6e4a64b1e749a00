package sidecar_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/broker"
	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/delivery"
)

// TestStopRequestedWhileStarting: a SIGTERM that comes while kretry run is
// still starting (the broker check, the topics, the group clients) is a
// clean stop, not a failure: Run returns nil instead of "no Kafka broker
// answered …: context canceled" or "describing source topic …: context
// canceled" (exit 1 and an error line in `kretry run`), and it leaves no
// static member of an engine already built in its group. Each case cancels
// the context at another point of the start of two topics.
func TestStopRequestedWhileStarting(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	for _, after := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 15 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond} {
		t.Run(after.String(), func(t *testing.T) {
			cfg, err := config.Parse([]byte(fmt.Sprintf(`
kafka: {brokers: [%q], instance_id: start-%[2]d}
app: {url: http://127.0.0.1:1/unused}
metrics: {listen: ""}
lag: {interval: 0s}
topics:
  - name: orders-%[2]d-a
  - name: orders-%[2]d-b
`, b.Addrs()[0], after.Microseconds())), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range []string{"a", "b"} {
				if _, err := adm.CreateTopic(context.Background(), 3, 1, nil, fmt.Sprintf("orders-%d-%s", after.Microseconds(), x)); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			if after == 0 {
				cancel()
			} else {
				time.AfterFunc(after, cancel)
			}
			defer cancel()
			err = sidecar.Run(ctx, cfg, sidecar.Options{
				Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
				Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil }),
			})
			if err != nil {
				t.Errorf("Run with the stop requested %v into the start = %v, want nil (a clean stop)", after, err)
			}
			// Nothing stays in the group: a static member left behind
			// would hold its partitions for the session timeout (45s).
			for _, x := range []string{"a", "b"} {
				group := fmt.Sprintf("orders-%d-%s-kretry", after.Microseconds(), x)
				gs, err := adm.DescribeGroups(context.Background(), group)
				if err != nil {
					t.Fatal(err)
				}
				if ms := gs[group].Members; len(ms) > 0 {
					t.Errorf("after a start cut short %v in, group %s still has %d member(s): the first of them %s", after, group, len(ms), ms[0].MemberID)
				}
			}
		})
	}
}
