package dlq

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// FakeClock is a clock whose Sleep advances it at once.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func NewFakeClock() *FakeClock { return &FakeClock{now: time.Now()} }

func (f *FakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *FakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	f.now = f.now.Add(max(d, 0))
	f.mu.Unlock()
	return nil
}

// WithEndTransaction replaces how the client ends a transaction.
func WithEndTransaction(f func(context.Context, *kgo.Client, kgo.TransactionEndTry) error) Option {
	return func(cl *Client) { cl.endTxn = f }
}

// WithClock replaces the clock of the rate limit.
func WithClock(c clock) Option { return func(cl *Client) { cl.clk = c } }

// ManualReaderProvider is a meter provider read on demand.
type ManualReaderProvider struct {
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

func NewManualReaderProvider() *ManualReaderProvider {
	r := sdkmetric.NewManualReader()
	return &ManualReaderProvider{Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)), reader: r}
}

// Gauges collects once and returns each gauge's first data point.
func (m *ManualReaderProvider) Gauges(t interface{ Fatal(...any) }) map[string]float64 {
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch d := mt.Data.(type) {
			case metricdata.Gauge[int64]:
				if len(d.DataPoints) > 0 {
					out[mt.Name] = float64(d.DataPoints[0].Value)
				}
			case metricdata.Gauge[float64]:
				if len(d.DataPoints) > 0 {
					out[mt.Name] = d.DataPoints[0].Value
				}
			}
		}
	}
	return out
}

// ErrBadRequest marks Move's argument errors (the admin API's 400).
var ErrBadRequest = errBadRequest

// HeldLeases returns the holders of the DLQ's lease that an operation
// starting now would watch.
func (c *Client) HeldLeases(ctx context.Context) ([]Lease, error) {
	rd, held, err := c.heldLeases(ctx, MarksTopic(c.t.DLQ))
	if err != nil {
		return nil, err
	}
	rd.Close()
	return held, nil
}
