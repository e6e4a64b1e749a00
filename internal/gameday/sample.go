package gameday

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/retrytopics"
)

// sample is what the game day saw at one moment: the broker's offsets (by
// kretry's lag monitor, package lag, reading the brokers) and, for kretry,
// its /metrics.
type sample struct {
	At time.Time `json:"t"`
	// SourceEnd and SourceCommitted are summed over the source's
	// partitions: their rates are the enqueue and the drain rate.
	SourceEnd       int64 `json:"source_end"`
	SourceCommitted int64 `json:"source_committed"`
	// Lag is the peer's group lag in records per stage (source, tier-N,
	// parking); LagTotal sums the source and the tiers (parking holds
	// kretry's bookkeeping records beside the parked ones).
	Lag      map[string]int64 `json:"lag"`
	LagTotal int64            `json:"lag_total"`
	// ScanOK is false when the lag scan could not measure every partition.
	ScanOK bool `json:"scan_ok"`
	// Parts are the positions of the source's and the tiers' partitions,
	// by "topic/partition".
	Parts map[string]partPos `json:"-"`
	// DLQ counts the dead-lettered records read so far.
	DLQ int `json:"dlq"`
	// CPU is the CPU time of this process so far in seconds (-1 unknown):
	// with the embedded broker it holds the broker, the app and the peer.
	CPU float64 `json:"cpu_seconds"`
	// From kretry's /metrics; Metrics is false when it was not read (the
	// blocking peer has none).
	Metrics bool `json:"metrics"`
	// Deliveries and Retries are cumulative: every delivery attempt, and
	// those from a retry tier (kretry_deliveries_total by kretry_stage).
	Deliveries float64 `json:"deliveries"`
	Retries    float64 `json:"retries"`
	InFlight   float64 `json:"in_flight"`
	// Parked is kretry_parking_records: records held in parking behind a
	// failing record of their key (the parking topic's lag also counts
	// kretry's bookkeeping records there, so it is not used).
	Parked float64 `json:"parked"`
	// Dependency is kretry_dependency_state (0 reachable, 1 mostly
	// failing, 2 refusing); Breaker the breaker's state gauge (0 closed,
	// 1 open, 2 half-open) or -1 when kretry exports none.
	Dependency float64 `json:"dependency_state"`
	Breaker    float64 `json:"breaker_state"`
}

// partPos is one partition's position in a scan.
type partPos struct{ Committed, End, Lag int64 }

// breakerMetrics are the names the breaker's state gauge may have, first
// match wins (the overload work names it; docs/METRICS.md).
var breakerMetrics = []string{"kretry_breaker_state"}

// sampler scans the peer's group every interval and keeps the samples.
type sampler struct {
	mon     *lag.Monitor
	metrics string // http://host:port/metrics, "" for none
	dlq     *dlqReader

	mu      sync.Mutex
	samples []sample
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.take(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) take(ctx context.Context) {
	sm := sample{At: time.Now(), Lag: map[string]int64{}, Parts: map[string]partPos{}, Breaker: -1}
	snap, err := s.mon.Scan(ctx)
	if ctx.Err() != nil {
		return
	}
	sm.ScanOK = err == nil
	if snap != nil {
		for _, r := range snap.Rows {
			if r.Error != "" {
				continue
			}
			sm.Lag[r.Stage] += r.Lag
			if r.Stage != lag.StageParking {
				sm.LagTotal += r.Lag
				sm.Parts[r.Topic+"/"+strconv.Itoa(int(r.Partition))] = partPos{Committed: r.Committed, End: r.End, Lag: r.Lag}
			}
			if r.Stage == lag.StageSource {
				sm.SourceEnd += r.End
				sm.SourceCommitted += max(r.Committed, 0)
			}
		}
	}
	sm.DLQ = s.dlq.count()
	sm.CPU = cpuSeconds()
	if s.metrics != "" {
		s.scrape(ctx, &sm)
	}
	s.mu.Lock()
	s.samples = append(s.samples, sm)
	s.mu.Unlock()
}

// scrape reads kretry's /metrics into sm.
func (s *sampler) scrape(ctx context.Context, sm *sample) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.metrics, nil)
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return
	}
	sm.Metrics = true
	if f := fams["kretry_deliveries_total"]; f != nil {
		for _, m := range f.Metric {
			v := m.GetCounter().GetValue()
			sm.Deliveries += v
			if strings.HasPrefix(label(m, "kretry_stage"), "tier-") {
				sm.Retries += v
			}
		}
	}
	sm.InFlight = sum(fams["kretry_deliveries_in_flight"])
	sm.Parked = sum(fams["kretry_parking_records"])
	sm.Dependency = sum(fams["kretry_dependency_state"])
	for _, n := range breakerMetrics {
		if f := fams[n]; f != nil {
			sm.Breaker = sum(f)
			break
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sum adds up a gauge's series (the worst state, for states of one
// topic: kretry has one series per topic or URL here).
func sum(f *dto.MetricFamily) float64 {
	if f == nil {
		return 0
	}
	var v float64
	for _, m := range f.Metric {
		v += m.GetGauge().GetValue()
	}
	return v
}

func (s *sampler) all() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

func (s *sampler) latest() (sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return sample{}, false
	}
	return s.samples[len(s.samples)-1], true
}

// deadLetter is one record read from the peer's DLQ.
type deadLetter struct {
	ID    int64     `json:"id"`
	Kind  string    `json:"kind"`
	At    time.Time `json:"read_at"`
	Class string    `json:"error_class,omitempty"` // kretry-error-class; "" for the blocking peer
	// Attempt is kretry-attempt, 0 when absent.
	Attempt int    `json:"attempt,omitempty"`
	Status  string `json:"error_status,omitempty"`
	Message string `json:"error_message,omitempty"`
	// Origin is true when the record carries its original coordinates
	// (kretry-original-topic/-partition/-offset), as a redrive needs.
	Origin bool `json:"origin"`
}

// dlqReader reads the DLQ as an operator would: committed records only.
type dlqReader struct {
	mu      sync.Mutex
	letters []deadLetter
}

func (d *dlqReader) run(ctx context.Context, cl *kgo.Client) {
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil || fs.IsClientClosed() {
			return
		}
		fs.EachRecord(func(r *kgo.Record) {
			var o order
			_ = json.Unmarshal(r.Value, &o)
			dl := deadLetter{ID: o.ID, Kind: o.Kind, At: time.Now()}
			for _, h := range r.Headers {
				switch h.Key {
				case retrytopics.HeaderErrorClass:
					dl.Class = string(h.Value)
				case retrytopics.HeaderAttempt:
					dl.Attempt, _ = strconv.Atoi(string(h.Value))
				case retrytopics.HeaderErrorStatus:
					dl.Status = string(h.Value)
				case retrytopics.HeaderErrorMessage:
					dl.Message = string(h.Value)
				}
			}
			if _, err := retrytopics.ReadOrigin(r, false, 0); err == nil && dl.Class != "" {
				dl.Origin = true
			}
			d.mu.Lock()
			d.letters = append(d.letters, dl)
			d.mu.Unlock()
		})
	}
}

func (d *dlqReader) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.letters)
}

// has reports whether the record with the load's id was read.
func (d *dlqReader) has(id int64) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.ContainsFunc(d.letters, func(l deadLetter) bool { return l.ID == id })
}

func (d *dlqReader) all() []deadLetter {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deadLetter(nil), d.letters...)
}
