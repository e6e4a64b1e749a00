package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kretry/kretry/lag"
	"github.com/kretry/kretry/pkg/config"
)

// The overload signals of `kretry lag` (issue 11, docs/METRICS.md
// "kretry lag"): per pipeline, from the brokers (lag.Pipelines: enqueue
// vs drain rate, oldest record, moves to the tiers and the DLQ) and from
// the running instances' /metrics (lag.ReadInstance: breaker, limit,
// retry share, budget, top failure fingerprints).

// metricsTarget is one instance's /metrics. implicit: taken from the
// config's metrics.listen, not from --metrics, so a failure to read it is
// a note, not a problem of the scan.
type metricsTarget struct {
	url      string
	implicit bool
}

// metricsTargets returns the /metrics to read: the --metrics flags (none
// with "none"), or the config's metrics.listen.
func metricsTargets(cfg *config.Config, flags []string) ([]metricsTarget, error) {
	if len(flags) == 0 {
		if cfg.Metrics.Listen == "" {
			return nil, nil
		}
		host, port, err := net.SplitHostPort(cfg.Metrics.Listen)
		if err != nil {
			return nil, fmt.Errorf("metrics.listen %q: %w", cfg.Metrics.Listen, err)
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = "127.0.0.1" // listening on every address: ask loopback
		}
		return []metricsTarget{{url: "http://" + net.JoinHostPort(host, port) + "/metrics", implicit: true}}, nil
	}
	var ts []metricsTarget
	for _, f := range flags {
		if f == "none" {
			return nil, nil
		}
		u := f
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || p.Scheme != "http" && p.Scheme != "https" {
			return nil, fmt.Errorf("--metrics %q: want an instance's metrics address, such as 127.0.0.1:9464 or http://pod:9464/metrics", f)
		}
		if p.Path == "" || p.Path == "/" {
			p.Path = "/metrics"
		}
		ts = append(ts, metricsTarget{url: p.String()})
	}
	return ts, nil
}

// instanceRead is one read of one instance, for printing and JSON.
type instanceRead struct {
	*lag.Instance
	URL      string `json:"url"`
	Implicit bool   `json:"from_config,omitempty"`
	Error    string `json:"error,omitempty"`
	// prev is the same instance's previous read (for rates), nil for none.
	prev *lag.Instance
}

// signals keeps what the rates need from one scan to the next.
type signals struct {
	cfg      *config.Config
	targets  []metricsTarget
	timeout  time.Duration
	prevSnap *lag.Snapshot
	prevInst map[string]*lag.Instance

	// Of the latest scan:
	Pipelines []lag.Pipeline
	Instances []instanceRead
}

// read computes the signals of snap and reads the instances; it returns
// the problems of explicitly named instances that could not be read.
func (s *signals) read(ctx context.Context, snap *lag.Snapshot) []string {
	s.Pipelines = lag.Pipelines(s.prevSnap, snap)
	s.prevSnap = snap
	s.Instances = s.Instances[:0]
	var problems []string
	for _, t := range s.targets {
		rctx, cancel := context.WithTimeout(ctx, s.timeout)
		in, err := lag.ReadInstance(rctx, t.url)
		cancel()
		r := instanceRead{Instance: in, URL: t.url, Implicit: t.implicit, prev: s.prevInst[t.url]}
		if err != nil {
			r.Error = err.Error()
			if !t.implicit {
				problems = append(problems, err.Error())
			}
		} else {
			s.prevInst[t.url] = in
		}
		s.Instances = append(s.Instances, r)
	}
	return problems
}

// appendJSON adds the signals to a snapshot's JSON object.
func (s *signals) appendJSON(snapJSON []byte) ([]byte, error) {
	extra, err := json.Marshal(struct {
		Pipelines []lag.Pipeline `json:"pipelines"`
		Instances []instanceRead `json:"instances"`
	}{s.Pipelines, s.Instances})
	if err != nil {
		return nil, err
	}
	// Both are objects: {…snapshot…,…signals…}.
	return append(append(snapJSON[:len(snapJSON)-1:len(snapJSON)-1], ','), extra[1:]...), nil
}

// print writes the pipelines and the instances as tables.
func (s *signals) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(s.Pipelines) > 0 {
		over := "rates need two scans (--watch)"
		if p := s.Pipelines[0]; p.Interval > 0 {
			over = "rates over the last " + p.Interval.Round(time.Millisecond).String() + ", in offsets/s"
		}
		fmt.Fprintf(tw, "\nPipelines, from the brokers (%s):\n", over)
		fmt.Fprintln(tw, "SOURCE\tGROUP\tLAG\tOLDEST\tENQUEUE/s\tDRAIN/s\tTO TIERS/s\tTO DLQ/s")
		for _, p := range s.Pipelines {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", p.Source, p.Group, p.Lag, oldest(p),
				perSecond(p.Enqueue, p.RatesKnown), perSecond(p.Drain, p.RatesKnown),
				perSecond(p.ToTiers, p.RatesKnown), perSecond(p.ToDLQ, p.RatesKnown))
		}
		tw.Flush()
	}
	for _, r := range s.Instances {
		s.printInstance(tw, r)
	}
}

func (s *signals) printInstance(tw *tabwriter.Writer, r instanceRead) {
	from := ""
	if r.Implicit {
		from = " (metrics.listen)"
	}
	if r.Error != "" {
		hint := ""
		if r.Implicit {
			hint = "; is `kretry run` serving there? Name an instance with --metrics URL, or --metrics none"
		}
		fmt.Fprintf(tw, "\nInstance %s%s: not read: %s%s\n", r.URL, from, r.Error, hint)
		tw.Flush()
		return
	}
	fmt.Fprintf(tw, "\nInstance %s%s, its own partitions:\n", r.URL, from)
	fmt.Fprintln(tw, "SOURCE\tGROUP\tBREAKER\tOPENED\tHELD\tLIMIT\tIN FLIGHT\tRETRY SHARE\tBUDGET\tDEAD-LETTERED\tEXPIRED")
	for _, p := range r.Pipelines {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%.0f\t%.0f\t%s\t%s\t%.0f\t%.0f\n", p.Source, p.Group, breakerName(p.Breaker),
			opened(p.Opened), p.Held, p.Limit, p.InFlight, retryShare(&p, r.prev), s.budget(&p), p.DeadLettered, p.Expired)
	}
	tw.Flush()
	fmt.Fprintln(tw, "\nTop failures since it started (fingerprint: the message's start, numbers as #):")
	fmt.Fprintln(tw, "SOURCE\tCOUNT\tCLASS\tTYPE\tFINGERPRINT")
	n := 0
	for _, p := range r.Pipelines {
		for _, f := range p.Failures[:min(5, len(p.Failures))] {
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\n", p.Source, f.Count, f.Class, f.Type, f.Fingerprint)
			n++
		}
	}
	if n == 0 {
		fmt.Fprintln(tw, "(none)")
	}
	tw.Flush()
}

func oldest(p lag.Pipeline) string {
	switch {
	case !p.AgeKnown:
		return "-"
	case p.Oldest < time.Second:
		return p.Oldest.Round(time.Millisecond).String()
	}
	return p.Oldest.Round(time.Second).String()
}

func perSecond(v float64, known bool) string {
	if !known {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func breakerName(s int) string {
	switch s {
	case 0:
		return "closed"
	case 1:
		return "OPEN"
	case 2:
		return "probing"
	}
	return "-"
}

func opened(by map[string]float64) string {
	var total float64
	var parts []string
	for _, r := range []string{"dependency", "systemic"} {
		if by[r] > 0 {
			total += by[r]
			parts = append(parts, fmt.Sprintf("%.0f %s", by[r], r))
		}
	}
	if total == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

func retryShare(p *lag.InstancePipeline, prev *lag.Instance) string {
	if pp := prev.Find(p.Group, p.Source); pp != nil {
		if v, ok := p.RetryShare(pp); ok {
			return fmt.Sprintf("%.0f%% (interval)", 100*v)
		}
		return "- (interval)"
	}
	if v, ok := p.RetryShare(nil); ok {
		return fmt.Sprintf("%.0f%% (since start)", 100*v)
	}
	return "-"
}

// budget is the retry budget's use: the ratio over its window against
// the configured ratio, and the retries that waited.
func (s *signals) budget(p *lag.InstancePipeline) string {
	for i := range s.cfg.Topics {
		if t := &s.cfg.Topics[i]; t.Name == p.Source && t.Retry.Budget.Ratio > 0 {
			return fmt.Sprintf("%.0f%% of %.0f%%, %.0f waited", 100*p.BudgetRatio, 100*t.Retry.Budget.Ratio, p.BudgetDenied)
		}
	}
	return "off"
}
