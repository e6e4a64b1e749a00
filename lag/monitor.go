package lag

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/metric"
)

// Monitor scans consumer groups for lag, age and status. Create it with
// New; call Scan for one scan or Run for one every Config.Interval. The
// latest scan feeds the metrics (WithMeterProvider) and Latest.
type Monitor struct {
	cl    *kgo.Client
	adm   *kadm.Client
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	fetch *fetcher
	mp    metric.MeterProvider
	inst  *instruments

	scanMu  sync.Mutex // one scan at a time: the history is the scans' order
	history map[rowKey]*history
	gen     uint64 // the scan count, to drop the history of rows gone
	lastErr string
	loading bool // lastErr is a coordinator not ready, logged at info level

	mu     sync.RWMutex
	latest *Snapshot
}

// history is the samples of one row, the latest last.
type history struct {
	samples []Sample
	gen     uint64 // the scan that saw the row last
}

type rowKey struct {
	group, topic string
	partition    int32
}

// Option configures a Monitor.
type Option func(*Monitor)

// WithLogger sets the logger for scan failures; the default is
// slog.Default().
func WithLogger(l *slog.Logger) Option { return func(m *Monitor) { m.log = l } }

// WithMeterProvider exports the latest scan as observable gauges, plus the
// scans themselves (see docs/METRICS.md); the default exports nothing.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(m *Monitor) { m.mp = mp } }

// WithClock replaces time.Now, for tests.
func WithClock(now func() time.Time) Option { return func(m *Monitor) { m.now = now } }

// New returns a Monitor that talks to the cluster through cl, a client
// without a consumer group (New neither consumes with it nor closes it).
// It returns an error only when the metric instruments cannot be created.
func New(cl *kgo.Client, cfg Config, opts ...Option) (*Monitor, error) {
	cfg.setDefaults()
	m := &Monitor{
		cl:      cl,
		adm:     kadm.NewClient(cl),
		cfg:     cfg,
		log:     slog.Default(),
		now:     time.Now,
		fetch:   newFetcher(cl),
		history: map[rowKey]*history{},
	}
	for _, o := range opts {
		o(m)
	}
	if m.mp != nil {
		inst, err := newInstruments(m, m.mp)
		if err != nil {
			return nil, err
		}
		m.inst = inst
	}
	return m, nil
}

// Config returns the Monitor's config, defaults filled in.
func (m *Monitor) Config() Config { return m.cfg }

// Latest returns the latest scan, nil before the first one. The snapshot
// is shared: do not modify it.
func (m *Monitor) Latest() *Snapshot {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.latest
}

// Close unregisters the metric callbacks. The client stays open.
func (m *Monitor) Close() error {
	if m.inst != nil {
		return m.inst.close()
	}
	return nil
}

// Run scans at once and then every Config.Interval until ctx is done; it
// returns nil then. A failed scan is logged (at warn level when its error
// differs from the previous scan's; at info level in the first 30s when a
// group coordinator is only not ready yet, see logScan) and shows in the snapshot and the
// metrics as status ERR; the next scan tries again.
func (m *Monitor) Run(ctx context.Context) error {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	start := time.Now()
	for {
		_, err := m.Scan(ctx)
		if ctx.Err() != nil {
			return nil
		}
		m.logScan(err, time.Since(start))
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// call bounds one broker call by Config.Timeout.
func (m *Monitor) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.cfg.Timeout)
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// missingHint explains a topic of the config that the brokers do not
// know: kretry run creates its tiers, parking topic and DLQ when it
// starts, so a missing one means the config differs from the running
// instance's (a tier added or changed) or kretry run never started with it.
func missingHint(err error, stage string) string {
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) || stage == "" || stage == StageSource {
		return ""
	}
	return " (kretry run creates this topic when it starts with this config: does the config differ from the running instance's, e.g. its retry.tiers?)"
}

func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// ages fills Age, AgeKnown and MarkersOnly of the rows.
func (m *Monitor) ages(ctx context.Context, now time.Time, meta map[string]topicMeta, sets ...[]Row) {
	n := 0
	for _, rows := range sets {
		n += len(rows)
	}
	wants := make([]fetchWant, 0, n)
	keyOf := func(r *Row) fetchKey {
		_, from, _ := Compute(r.Committed, r.LogStart, r.End)
		return fetchKey{id: meta[r.Topic].id, topic: r.Topic, partition: r.Partition, from: from, committed: r.readCommitted}
	}
	for _, rows := range sets {
		for i := range rows {
			r := &rows[i]
			if r.Error != "" {
				continue
			}
			if r.Lag == 0 {
				r.AgeKnown = true
				continue
			}
			k := keyOf(r)
			wants = append(wants, fetchWant{key: k, end: r.End, leader: meta[r.Topic].leaders[r.Partition]})
		}
	}
	if len(wants) == 0 {
		m.fetch.cache = map[fetchKey]fetchResult{}
		return
	}
	c, cancel := m.call(ctx)
	defer cancel()
	res, st := m.fetch.fetch(c, wants)
	if st.Unresolved > 0 {
		m.log.Debug("lag: ages of some partitions not read in time", "unresolved", st.Unresolved, "rounds", st.Rounds)
	}
	for _, rows := range sets {
		for i := range rows {
			r := &rows[i]
			if r.Error != "" || r.Lag == 0 {
				continue
			}
			k := keyOf(r)
			got, ok := res[k]
			switch {
			case !ok:
			case got.found:
				r.Age, r.AgeKnown = max(now.Sub(got.ts), 0), true
			default:
				r.Lag, r.Age, r.AgeKnown, r.MarkersOnly = 0, 0, true, true
			}
		}
	}
}

// failedRows repeats the previous scan's rows with err, for a scan that
// could not even list the topics.
func (m *Monitor) failedRows(err error) (rows, dlq []Row) {
	prev := m.Latest()
	if prev == nil {
		return nil, nil
	}
	fail := func(in []Row) []Row {
		out := slices.Clone(in)
		for i := range out {
			out[i].Error, out[i].Lag, out[i].Age, out[i].AgeKnown = err.Error(), -1, 0, false
		}
		return out
	}
	return fail(prev.Rows), fail(prev.DLQ)
}

// failedGroupRows are the rows of a group whose commits could not be
// fetched: the previous scan's, or else the expected topics' partitions.
func (m *Monitor) failedGroupRows(g Group, err error, meta map[string]topicMeta) []Row {
	var out []Row
	if prev := m.Latest(); prev != nil {
		for _, r := range prev.Rows {
			if r.Group == g.Name {
				r.Error, r.Lag, r.Age, r.AgeKnown = err.Error(), -1, 0, false
				out = append(out, r)
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, t := range g.Topics {
		for _, p := range meta[t.Name].partitions {
			out = append(out, Row{Group: g.Name, Topic: t.Name, Partition: p, Source: t.Source, Stage: t.Stage, Wait: t.Wait,
				Committed: -1, LastStable: -1, Lag: -1, Error: err.Error(), readCommitted: g.ReadCommitted})
		}
	}
	return out
}

// finish evaluates the statuses, keeps the history of the rows seen and
// publishes the snapshot.
func (m *Monitor) finish(snap *Snapshot, rows, dlq []Row, errs []error) (*Snapshot, error) {
	m.gen++
	worst := map[string]Status{}
	for i := range rows {
		r := &rows[i]
		k := rowKey{r.Group, r.Topic, r.Partition}
		h := m.history[k]
		if h == nil {
			h = &history{samples: make([]Sample, 0, m.cfg.Window+1)}
			m.history[k] = h
		}
		h.gen = m.gen
		h.samples = append(h.samples, Sample{Time: snap.Time, Committed: r.Committed, Lag: r.Lag, Err: r.Error != ""})
		if len(h.samples) > m.cfg.Window {
			h.samples = append(h.samples[:0], h.samples[len(h.samples)-m.cfg.Window:]...)
		}
		r.Status = Evaluate(h.samples, Facts{Window: m.cfg.Window, Wait: r.Wait, Age: r.Age, AgeKnown: r.AgeKnown, Assigned: r.Assigned})
		r.drain(h.samples)
		worst[r.Group] = max(worst[r.Group], r.Status)
	}
	for k, h := range m.history {
		if h.gen != m.gen {
			delete(m.history, k) // gone: a deleted topic or group, a moved assignment
		}
	}
	for i := range dlq {
		if dlq[i].Error != "" {
			dlq[i].Status = StatusErr
		}
	}
	for i := range snap.Groups {
		g := &snap.Groups[i]
		g.Status = worst[g.Name]
		if g.Error != "" {
			g.Status = StatusErr
		}
	}
	sortRows(rows)
	sortRows(dlq)
	snap.Rows, snap.DLQ = rows, dlq
	snap.Duration = m.now().Sub(snap.Time)
	m.mu.Lock()
	m.latest = snap
	m.mu.Unlock()
	err := errors.Join(errs...)
	if m.inst != nil {
		m.inst.scanned(snap, err)
	}
	return snap, err
}
