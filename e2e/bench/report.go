package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// report prints the table, the ratios and the targets.
func report(out io.Writer, cfg *config, s *site, all []*result, m *memResult) {
	rs := tableRows(all)
	find := finder(func(wl, peer string) *result {
		for _, r := range rs {
			if r.w.name == wl && r.p.name == peer && r.err == nil {
				return r
			}
		}
		return nil
	})
	rows := [][]string{{"workload", "peer", "rec/s", "×baseline", "healthy-key rec/s", "×own healthy run",
		"p50", "p99", "p99 ×own healthy", "retry late p99 paced", "retry late p99 drain", "CPU s/100k", "broker CPU s/100k", "notes"}}
	brokerInCPU := cfg.inproc && s.kind == siteEmbedded
	for _, r := range rs {
		rows = append(rows, tableRow(r, find, brokerInCPU))
	}
	markdown(out, rows)
	reportTxns(out, rs)
	deep := deepRuns(all)
	reportAdjacent(out, rs, find)
	reportDeep(out, deep)
	reportRatios(out, find)
	reportTargets(out, find, deep, m)
	reportMemory(out, m)
}

// ratio is a/b as the table prints it, or "–" when either is 0.
func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// tableRow is r's row of the table (brokerInCPU: the broker's CPU counts
// in the peers' CPU, -inproc-broker on kfake).
func tableRow(r *result, find finder, brokerInCPU bool) []string {
	if r.err != nil {
		return []string{r.w.name, r.p.name, "", "", "", "", "", "", "", "", "", "", "", "error: " + short(r.err)}
	}
	xb, xo, xp := "–", "–", "–"
	if base := find(r.w.name, r.p.baseline); base != nil {
		xb = ratio(r.recPerSec, base.recPerSec)
	}
	if own := ownHealthy(r, find); own != nil && r.w.name != "healthy" {
		xo = ratio(r.healthyPerSec, own.recPerSec)
		xp = ratio(float64(r.p99), float64(own.p99))
	}
	late, drain := "–", "–"
	if r.lateN > 0 {
		late, drain = ms(r.lateP99Paced), ms(r.lateP99Drain)
	}
	brk := fmt.Sprintf("%.2f", r.brokerPer100)
	if brokerInCPU {
		brk = "(in CPU)"
	}
	return []string{r.w.name, r.p.name, fmt.Sprintf("%.0f", r.recPerSec), xb, fmt.Sprintf("%.0f", r.healthyPerSec), xo,
		ms(r.p50), ms(r.p99), xp, late, drain, fmt.Sprintf("%.2f", r.cpuPer100k), brk, notes(r)}
}

// notes is the notes cell of r's row: what makes its figures partial, and
// what the JVM peers cost beyond them.
func notes(r *result) string {
	var ns []string
	if !r.drainComplete {
		ns = append(ns, "backlog not drained in 120s")
	}
	if !r.pacedComplete {
		ns = append(ns, "paced phase incomplete: p99 is a lower bound")
	}
	if r.dropped > 0 {
		ns = append(ns, fmt.Sprintf("dropped %d failed records", r.dropped))
	}
	if r.dupes > 0 {
		ns = append(ns, fmt.Sprintf("%d repeated acks", r.dupes))
	}
	if r.peerRSS > 0 {
		ns = append(ns, fmt.Sprintf("JVM peak RSS %.0f MiB", float64(r.peerRSS)/(1<<20)))
	}
	if len(r.adjacent) > 0 {
		ns = append(ns, fmt.Sprintf("×own healthy: mean of %d adjacent healthy runs", len(r.adjacent)))
	}
	if r.peerJIT > 0 {
		ns = append(ns, fmt.Sprintf("JIT %.1fs CPU over the JVM's life", r.peerJIT.Seconds()))
	}
	return strings.Join(ns, "; ")
}

// reportTxns prints the kretry peers' transaction summaries.
func reportTxns(out io.Writer, rs []*result) {
	var kr []string
	for _, r := range rs {
		if r.txns != "" {
			kr = append(kr, fmt.Sprintf("      %-9s %-12s start→first source fetch %s, assigned→first delivery %s; %s", r.w.name, r.p.name, ms(r.joinDelay), ms(r.assignedToFirst), r.txns))
		}
	}
	if len(kr) > 0 {
		fmt.Fprintln(out, "\n    kretry transactions (backlog and paced phases):")
		for _, l := range kr {
			fmt.Fprintln(out, l)
		}
	}
}

// reportMemory prints the memory micro-measure, when it ran.
func reportMemory(out io.Writer, m *memResult) {
	if m == nil {
		return
	}
	fmt.Fprintf(out, "\n    memory (kretry, ordering key; live heap after GC, broker not counted): %d keys blocked, %d records parked (%d per key; key %d bytes, value %d bytes)\n",
		m.blockedKeys, m.parked, m.perKey, m.keyBytes, m.valueBytes)
	fmt.Fprintf(out, "      per blocked key    %6.0f bytes   (heap %d → %d)\n", m.perBlockedKey, m.heap0, m.heap1)
	fmt.Fprintf(out, "      per parked record  %6.0f bytes   (heap %d → %d)\n", m.perParkedRecord, m.heap1, m.heap2)
}

// short is the first line of err, at most 160 characters, for a table
// cell (the whole error went to stderr as the run failed).
func short(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	if utf8.RuneCountInString(s) > 160 {
		s = string([]rune(s)[:160]) + "…"
	}
	return s
}

type finder func(wl, peer string) *result

var (
	thr  = func(r *result) float64 { return r.recPerSec }
	hthr = func(r *result) float64 { return r.healthyPerSec }
	p99  = func(r *result) float64 { return float64(r.p99) }
	cpu  = func(r *result) float64 { return r.cpuPer100k }
)

func reportRatios(out io.Writer, find finder) {
	fmt.Fprintln(out, "\n    ratios:")
	line := func(what string, a, b *result, f func(*result) float64) {
		if a == nil || b == nil {
			return
		}
		fmt.Fprintf(out, "      %-62s %s\n", what, ratio(f(a), f(b)))
	}
	line("healthy: kretry in-process / bare (rec/s)", find("healthy", "kretry"), find("healthy", "bare"), thr)
	line("healthy: kretry in-process / watermill (rec/s)", find("healthy", "kretry"), find("healthy", "watermill"), thr)
	line("healthy: kretry HTTP / bare consume-and-POST (rec/s)", find("healthy", "kretry-http"), find("healthy", "bare-post"), thr)
	for _, sp := range []string{"spring-retry", "spring-block"} {
		for _, wl := range []string{"healthy", "failures", "slow-key"} {
			line(wl+": kretry in-process / "+sp+" (rec/s)", find(wl, "kretry"), find(wl, sp), thr)
		}
		line("healthy: kretry CPU per record / "+sp+"'s", find("healthy", "kretry"), find("healthy", sp), cpu)
		line("failures: "+sp+" healthy-key p99 / kretry's", find("failures", sp), find("failures", "kretry"), p99)
	}
	own := find.withOwn
	for _, pn := range []string{"blocking", "watermill", "kretry", "kretry-http", "spring-retry", "spring-block"} {
		a, b := own("failures", pn)
		line("failures: "+pn+" healthy-key p99 / own healthy p99", a, b, p99)
	}
	line("failures: blocking p99 / kretry p99", find("failures", "blocking"), find("failures", "kretry"), p99)
	line("failures: watermill p99 / kretry p99", find("failures", "watermill"), find("failures", "kretry"), p99)
	for _, pn := range []string{"bare", "blocking", "watermill", "kretry", "kretry-http", "bare-post", "spring-retry", "spring-block"} {
		a, b := own("slow-key", pn)
		if a != nil && b != nil {
			fmt.Fprintf(out, "      %-62s %s\n", "slow-key: "+pn+" other keys' rec/s / no-slow-key rec/s", ratio(hthr(a), thr(b)))
		}
	}
	line("1%-keys: kretry healthy-key p99 / own healthy p99", find("1%-keys", "kretry"), find("healthy", "kretry"), p99)
	line("1%-keys: kretry healthy-key rec/s / own healthy rec/s", find("1%-keys", "kretry"), find("healthy", "kretry"), func(r *result) float64 {
		if r.w.name == "healthy" {
			return r.recPerSec
		}
		return r.healthyPerSec
	})
	line("1%-keys: kretry rec/s (all records) / own healthy rec/s", find("1%-keys", "kretry"), find("healthy", "kretry"), thr)
	line("1%-keys: blocking p99 / kretry p99", find("1%-keys", "blocking"), find("1%-keys", "kretry"), p99)
	line("1%-keys: spring-block p99 / kretry p99", find("1%-keys", "spring-block"), find("1%-keys", "kretry"), p99)
}

// reportTargets prints issue 10's speed targets (and issue 3's) as PASS or
// MISS.
func reportTargets(out io.Writer, find finder, deep []*result, m *memResult) {
	fmt.Fprintln(out, "\n    targets (issue 10; issue 3 for 1%-keys):")
	target := func(what string, a, b *result, f, g func(*result) float64, ok func(float64) bool, want string) {
		if a == nil || b == nil || g(b) == 0 {
			fmt.Fprintf(out, "      n/a   %s (not run)\n", what)
			return
		}
		v := f(a) / g(b)
		fmt.Fprintf(out, "      %s  %-68s %.2f× (want %s)\n", verdict(ok(v)), what, v, want)
	}
	atLeast := func(w float64) func(float64) bool { return func(v float64) bool { return v >= w } }
	atMost := func(w float64) func(float64) bool { return func(v float64) bool { return v > 0 && v <= w } }
	target("healthy: kretry in-process ≥ 1.5× watermill (rec/s)", find("healthy", "kretry"), find("healthy", "watermill"), thr, thr, atLeast(1.5), "≥ 1.5×")
	if r := find("healthy", "kretry"); r != nil {
		us := r.cpuPer100k * 10 // CPU s per 100k records → µs per record
		fmt.Fprintf(out, "      %s  %-68s %.2fµs (want ≤ 3µs)\n", verdict(us > 0 && us <= 3), "healthy: kretry in-process CPU per record ≤ 3µs", us)
	}
	target("healthy: kretry HTTP ≥ 0.95× bare consume-and-POST (rec/s)", find("healthy", "kretry-http"), find("healthy", "bare-post"), thr, thr, atLeast(0.95), "≥ 0.95×")
	own := find.withOwn
	a, b := own("failures", "kretry")
	target("failures: kretry healthy-key p99 ≤ 1.3× own no-failure p99", a, b, p99, p99, atMost(1.3), "≤ 1.3×")
	a, b = own("failures", "kretry-http")
	target("failures: kretry HTTP healthy-key p99 ≤ 1.3× own no-failure p99", a, b, p99, p99, atMost(1.3), "≤ 1.3×")
	// The rec/s targets against the own healthy run take the deep runs
	// when there are any (deep.go).
	rate := func(wl, pn string) (*result, *result, string) {
		if a, b := deepOwn(deep, wl, pn); a != nil {
			return a, b, fmt.Sprintf(", %d records", a.backlog)
		}
		if wl == "1%-keys" {
			return find(wl, pn), find("healthy", pn), ""
		}
		a, b := own(wl, pn)
		return a, b, ""
	}
	a, b, on := rate("slow-key", "kretry")
	target("slow key: kretry other keys' rec/s ≥ 0.95× no-slow-key run"+on, a, b, hthr, thr, atLeast(0.95), "≥ 0.95×")
	a, b, on = rate("slow-key", "kretry-http")
	target("slow key: kretry HTTP other keys' rec/s ≥ 0.95× no-slow-key run"+on, a, b, hthr, thr, atLeast(0.95), "≥ 0.95×")
	reportTimeTargets(out, find)
	reportMemoryTargets(out, m)
	target("issue 3, 1% of keys failing: kretry healthy-key p99 ≤ 1.5× no-failure", find("1%-keys", "kretry"), find("healthy", "kretry"), p99, p99, atMost(1.5), "≤ 1.5×")
	a, b, on = rate("1%-keys", "kretry")
	target("issue 3, 1% of keys failing: kretry healthy-key rec/s ≥ 0.9× no-failure"+on, a, b, hthr, thr, atLeast(0.9), "≥ 0.9×")
	target("issue 3, 1% of keys failing: kretry rec/s, all records ≥ 0.9× no-failure"+on, a, b, thr, thr, atLeast(0.9), "≥ 0.9×")
}

// markdown prints rows as a Markdown table, padded to line up in a
// terminal too.
func markdown(out io.Writer, rows [][]string) {
	w := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			w[i] = max(w[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range r {
			pad := strings.Repeat(" ", w[i]-utf8.RuneCountInString(c))
			if i < 2 || i == len(r)-1 {
				b.WriteString(" " + c + pad + " |")
			} else {
				b.WriteString(" " + pad + c + " |")
			}
		}
		fmt.Fprintln(out, strings.TrimRight(b.String(), " "))
	}
	line(rows[0])
	sep := make([]string, len(w))
	for i := range w {
		if i < 2 || i == len(w)-1 {
			sep[i] = strings.Repeat("-", w[i])
		} else {
			sep[i] = strings.Repeat("-", w[i]-1) + ":"
		}
	}
	line(sep)
	for _, r := range rows[1:] {
		line(r)
	}
}

// verdict is a target line's first word.
func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// reportTimeTargets prints the retry lateness and first delivery targets.
func reportTimeTargets(out io.Writer, find finder) {
	for _, wl := range []string{"failures", "1%-keys"} {
		for _, pn := range []string{"kretry", "kretry-http"} {
			r := find(wl, pn)
			if r == nil || r.lateN == 0 {
				continue
			}
			for _, c := range []struct {
				phase string
				d     time.Duration
			}{{"paced", r.lateP99Paced}, {"backlog drain", r.lateP99Drain}} {
				fmt.Fprintf(out, "      %s  %-68s %s (want ≤ 100ms)\n", verdict(c.d <= 100*time.Millisecond),
					fmt.Sprintf("%s: %s retry lateness p99 ≤ 100ms, %s", wl, pn, c.phase), ms(c.d))
			}
		}
	}
	for _, pn := range []string{"kretry", "kretry-http"} {
		if r := find("healthy", pn); r != nil && r.assignedToFirst > 0 {
			fmt.Fprintf(out, "      %s  %-68s %s (want ≤ 100ms)\n", verdict(r.assignedToFirst <= 100*time.Millisecond),
				fmt.Sprintf("healthy: %s first delivery after partitions are assigned", pn), ms(r.assignedToFirst))
		}
	}
}

// reportMemoryTargets prints the memory targets, when the measure ran.
func reportMemoryTargets(out io.Writer, m *memResult) {
	if m == nil {
		return
	}
	fmt.Fprintf(out, "      %s  %-68s %.0f bytes (want ≤ 1024)\n", verdict(m.perBlockedKey <= 1024), "memory: per blocked key ≤ 1 KB", m.perBlockedKey)
	beyond := m.perParkedRecord - float64(m.keyBytes+m.valueBytes)
	fmt.Fprintf(out, "      %s  %-68s %.0f bytes (want ≤ 400)\n", verdict(beyond <= 400), "memory: per parked record beyond its key and value ≤ 400 bytes", beyond)
}
