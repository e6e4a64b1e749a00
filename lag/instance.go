package lag

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Instance is what one running kretry instance's /metrics says of its
// pipelines: the overload signals that live in the instance, not in the
// brokers (breaker state, in-flight limit, retry budget, failure
// fingerprints; docs/OVERLOAD.md). Each instance reports the partitions
// it owns; a group of several instances has one Instance each.
type Instance struct {
	URL       string             `json:"url"`
	Time      time.Time          `json:"time"`
	Pipelines []InstancePipeline `json:"pipelines"`
}

// InstancePipeline is one pipeline (group and source topic) of an
// Instance. Counters are since the instance started.
type InstancePipeline struct {
	Group  string `json:"group"`
	Source string `json:"source"`
	// Breaker is kretry_breaker_state: 0 closed, 1 open, 2 probing; -1
	// when the instance exports none (an older kretry).
	Breaker int `json:"breaker_state"`
	// Opened counts the breaker's openings by reason (dependency,
	// systemic); Held the failed deliveries that consumed no attempt.
	Opened map[string]float64 `json:"opened"`
	Held   float64            `json:"held"`
	// Limit is the in-flight limit in force, InFlight the deliveries
	// under way.
	Limit    float64 `json:"limit"`
	InFlight float64 `json:"in_flight"`
	// BudgetRatio is retries ÷ deliveries over retry.budget.window (0
	// without a budget); BudgetDenied the due retries that waited for it.
	BudgetRatio  float64 `json:"budget_ratio"`
	BudgetDenied float64 `json:"budget_denied"`
	// Deliveries are every delivery attempt, Retries those of tier
	// records; DeadLettered the records moved to the DLQ; Expired those
	// not delivered because older than max_age.
	Deliveries   float64 `json:"deliveries"`
	Retries      float64 `json:"retries"`
	DeadLettered float64 `json:"dead_lettered"`
	Expired      float64 `json:"expired"`
	// Failures are the top failure fingerprints, most frequent first.
	Failures []Failure `json:"failures,omitempty"`
}

// Failure is one failure fingerprint (kretry_delivery_failures_total):
// class, error type and the message's start with numbers masked.
type Failure struct {
	Class       string  `json:"class"`
	Type        string  `json:"type"`
	Fingerprint string  `json:"fingerprint"`
	Count       float64 `json:"count"`
}

// ReadInstance reads url (a kretry instance's /metrics) within ctx.
func ReadInstance(ctx context.Context, url string) (*Instance, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", url, err)
	}
	req.Header.Set("Accept", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics %s: answered %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics %s: not the Prometheus text format: %w", url, err)
	}
	return parseInstance(url, time.Now(), fams), nil
}

// parseInstance turns the metric families of one /metrics into an
// Instance.
func parseInstance(url string, now time.Time, fams map[string]*dto.MetricFamily) *Instance {
	idx := map[pipeKey]*InstancePipeline{}
	get := func(m *dto.Metric) *InstancePipeline {
		k := pipeKey{label(m, "messaging_consumer_group_name"), label(m, "kretry_source")}
		p := idx[k]
		if p == nil {
			p = &InstancePipeline{Group: k.group, Source: k.source, Breaker: -1, Opened: map[string]float64{}}
			idx[k] = p
		}
		return p
	}
	each := func(name string, f func(p *InstancePipeline, m *dto.Metric, v float64)) {
		for _, m := range fams[name].GetMetric() {
			if label(m, "kretry_source") == "" {
				continue
			}
			f(get(m), m, value(m))
		}
	}
	each("kretry_breaker_state", func(p *InstancePipeline, _ *dto.Metric, v float64) { p.Breaker = int(v) })
	each("kretry_breaker_opened_total", func(p *InstancePipeline, m *dto.Metric, v float64) { p.Opened[label(m, "kretry_reason")] += v })
	each("kretry_deliveries_held_total", func(p *InstancePipeline, _ *dto.Metric, v float64) { p.Held += v })
	each("kretry_delivery_limit", func(p *InstancePipeline, _ *dto.Metric, v float64) { p.Limit = v })
	each("kretry_deliveries_in_flight", func(p *InstancePipeline, _ *dto.Metric, v float64) { p.InFlight = v })
	each("kretry_retry_budget_ratio", func(p *InstancePipeline, _ *dto.Metric, v float64) { p.BudgetRatio = v })
	each("kretry_retry_budget_denied_total", func(p *InstancePipeline, _ *dto.Metric, v float64) { p.BudgetDenied += v })
	each("kretry_records_expired_total", func(p *InstancePipeline, _ *dto.Metric, v float64) { p.Expired += v })
	each("kretry_deliveries_total", func(p *InstancePipeline, m *dto.Metric, v float64) {
		p.Deliveries += v
		if strings.HasPrefix(label(m, "kretry_stage"), "tier-") {
			p.Retries += v
		}
	})
	each("kretry_moves_total", func(p *InstancePipeline, m *dto.Metric, v float64) {
		if label(m, "kretry_move_kind") == "dead-letter" {
			p.DeadLettered += v
		}
	})
	each("kretry_delivery_failures_total", func(p *InstancePipeline, m *dto.Metric, v float64) {
		p.Failures = append(p.Failures, Failure{Class: label(m, "kretry_error_class"), Type: label(m, "error_type"),
			Fingerprint: label(m, "kretry_error_fingerprint"), Count: v})
	})
	in := &Instance{URL: url, Time: now}
	for _, p := range idx {
		slices.SortFunc(p.Failures, func(a, b Failure) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Fingerprint, b.Fingerprint))
		})
		in.Pipelines = append(in.Pipelines, *p)
	}
	slices.SortFunc(in.Pipelines, func(a, b InstancePipeline) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Group, b.Group))
	})
	return in
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil: // no # TYPE line
		return m.GetUntyped().GetValue()
	}
	return 0
}

// RetryShare is retries ÷ deliveries since prev (the same instance read
// earlier; nil: since the instance started); ok is false when no
// delivery was made in between, or the counters went back (a restart).
func (p *InstancePipeline) RetryShare(prev *InstancePipeline) (share float64, ok bool) {
	d, r := p.Deliveries, p.Retries
	if prev != nil {
		d, r = d-prev.Deliveries, r-prev.Retries
	}
	if d <= 0 || r < 0 {
		return 0, false
	}
	return r / d, true
}

// Find returns in's pipeline of group and source, nil when absent.
func (in *Instance) Find(group, source string) *InstancePipeline {
	if in == nil {
		return nil
	}
	for i := range in.Pipelines {
		if p := &in.Pipelines[i]; p.Group == group && p.Source == source {
			return p
		}
	}
	return nil
}
