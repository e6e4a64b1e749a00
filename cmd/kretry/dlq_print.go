package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kretry/kretry/dlq"
)

// printable renders b on one line of a terminal: text when dlq.IsText and
// without tab, newline or carriage return, hex otherwise; cut to n runes.
func printable(b []byte, n int) string {
	if b == nil {
		return "(null)"
	}
	s := string(b)
	if !dlq.IsText(b) || strings.ContainsAny(s, "\t\n\r") {
		s = "0x" + hex.EncodeToString(b)
	}
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "…"
	}
	return s
}

func printList(w io.Writer, entries []*dlq.Entry, f *dlq.Filter, limit int, newest, asJSON bool) error {
	var sel []*dlq.Entry
	for _, e := range entries {
		if f.Match(e) {
			sel = append(sel, e)
		}
	}
	sort.SliceStable(sel, func(i, j int) bool { return sel[i].Timestamp.Before(sel[j].Timestamp) })
	if newest {
		slices.Reverse(sel)
	}
	matched := len(sel)
	if limit > 0 && len(sel) > limit {
		sel = sel[:limit]
	}
	if asJSON {
		out := make([]dlq.EntryJSON, 0, len(sel))
		for _, e := range sel {
			out = append(out, e.JSON(false))
		}
		return json.NewEncoder(w).Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RECORD\tSTATE\tKEY\tCLASS\tSTATUS\tATTEMPTS\tREDRIVES\tFIRST FAILURE\tLAST FAILURE\tAGE\tMESSAGE")
	now := time.Now()
	for _, e := range sel {
		msg := e.Message
		if e.Problem != "" {
			msg = "(" + e.Problem + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", e.Ref(), e.State, printable(e.Key, 24), e.Class(), statusText(e.Status),
			e.Attempts, e.Redrives, when(e.FirstFailure), when(e.LastFailure), now.Sub(e.Timestamp).Round(time.Second), printable([]byte(msg), 60))
	}
	if matched > len(sel) {
		fmt.Fprintf(tw, "%d of %s (--limit %d)\n", len(sel), countRecords(matched), limit)
	} else {
		fmt.Fprintf(tw, "%s\n", countRecords(len(sel)))
	}
	return tw.Flush()
}

// statusText is an HTTP status as the text tables print it: "-" for a
// failure without one (a timeout, a connection error, unreadable headers).
func statusText(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

func printShow(w io.Writer, e *dlq.Entry, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(e.JSON(true))
	}
	fmt.Fprintf(w, "record     %s (dead-lettered %s)\nstate      %s\n", e.Ref(), e.Timestamp.UTC().Format(time.RFC3339Nano), e.State)
	if e.Mark != nil {
		fmt.Fprintf(w, "mark       %s by %s at %s (op %s) %s %s\n", e.Mark.Action, e.Mark.By, e.Mark.At.UTC().Format(time.RFC3339), e.Mark.Op, e.Mark.To, e.Mark.Reason)
	}
	if e.Problem != "" {
		fmt.Fprintf(w, "problem    %s\n", e.Problem)
	}
	fmt.Fprintf(w, "ce-id      %s\nkey        %s\n", e.ID, printable(e.Key, 1<<20))
	fmt.Fprintln(w, "headers:")
	for _, h := range e.Headers {
		fmt.Fprintf(w, "  %s: %s\n", printable([]byte(h.Key), 200), printable(h.Value, 1<<20))
	}
	fmt.Fprintf(w, "value (%d bytes):\n", len(e.Value))
	switch {
	case e.Value == nil:
		fmt.Fprintln(w, "(null: a tombstone)")
	case dlq.IsText(e.Value): // the admin API's rule: text there, base64 otherwise
		fmt.Fprintln(w, string(e.Value))
	default:
		fmt.Fprint(w, hex.Dump(e.Value))
	}
	return nil
}

func printStats(w io.Writer, topic string, s *dlq.Stats, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(s)
	}
	if s.Waiting == 0 {
		fmt.Fprintf(w, "nothing is waiting in %s (%s: redriven %d, discarded %d)\n", topic, countRecords(s.Total), s.Redriven, s.Discarded)
		return nil
	}
	fmt.Fprintf(w, "records     %d  (waiting %d, redriven %d, discarded %d; unreadable waiting %d)\n", s.Total, s.Waiting, s.Redriven, s.Discarded, s.Unreadable)
	if !s.Oldest.IsZero() {
		fmt.Fprintf(w, "oldest      %s waiting (since %s)\n", time.Since(s.Oldest).Round(time.Second), s.Oldest.UTC().Format(time.RFC3339))
	}
	counts := func(title string, m map[string]int) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		fmt.Fprintf(w, "%-11s %s\n", title, strings.Join(parts, ", "))
	}
	counts("by class", s.ByClass)
	counts("by status", s.ByStatus)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nFINGERPRINT\tCOUNT\tCLASS\tSTATUS\tOLDEST\tMESSAGE")
	for _, f := range s.Fingerprints {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", f.ID, f.Count, f.Class, statusText(f.Status), when(f.Oldest), printable([]byte(f.Sample), 80))
	}
	return tw.Flush()
}

// printResult prints what a redrive or discard did: r, as Move returned it
// with failed its error (nil when it finished); limit is the request's
// --limit (0: none), for what to run to continue.
func printResult(w io.Writer, r *dlq.Result, asJSON bool, limit int, failed error) {
	if asJSON && r.DryRun {
		// The records too, as the text and the admin API's dry run give
		// them: what would move is the point of a dry run.
		records := make([]dlq.EntryJSON, 0, len(r.Entries))
		for _, e := range r.Entries {
			records = append(records, e.JSON(false))
		}
		_ = json.NewEncoder(w).Encode(struct {
			*dlq.Result
			Records []dlq.EntryJSON `json:"records"`
		}{r, records})
		return
	}
	if asJSON {
		_ = json.NewEncoder(w).Encode(r)
		return
	}
	verb := "redriven"
	if r.Action == dlq.ActionDiscard {
		verb = "discarded"
	}
	if r.DryRun {
		fmt.Fprintf(w, "dry run: %s would be %s (nothing moved)\n", countRecords(len(r.Entries)), verb)
		for _, e := range r.Entries {
			fmt.Fprintf(w, "  %s  %s  key %s  %s %s  %s\n", e.Ref(), e.ID, printable(e.Key, 24), e.Class(), statusText(e.Status), printable([]byte(e.Message), 60))
		}
	} else {
		fmt.Fprintf(w, "selected %d, %s %d, refused %d in %s (op %s)\n", r.Selected, verb, r.Moved, len(r.Refused), r.Elapsed.Round(time.Millisecond), r.Op)
		left := len(r.Entries) - r.Moved
		again := "run the same command again to continue"
		if limit > 0 {
			// The same command selects limit records anew: with --limit 20
			// stopped at 13, it would move 20 more, 33 in all.
			again = fmt.Sprintf("run it again with --limit %d to continue (with --limit %d it selects %d more)", left, limit, limit)
		}
		switch {
		case failed != nil && left > 0:
			fmt.Fprintf(w, "not finished: %d left; once the error below is resolved, %s (nothing moves twice)\n", left, again)
		case r.Stopped:
			fmt.Fprintf(w, "stopped before the end: %d left; %s (nothing moves twice; it selects anew, so records dead-lettered again meanwhile are selected too)\n", left, again)
		}
	}
	for _, f := range r.Refused {
		fmt.Fprintf(w, "refused %s: %s\n", spellRef(f.Record), f.Reason)
	}
	for _, f := range r.Skipped {
		fmt.Fprintf(w, "not moved %s: %s\n", spellRef(f.Record), f.Reason)
	}
}

// spellRef spells a record reference P/O out as "partition P offset O".
func spellRef(ref string) string {
	if p, o, ok := dlq.ParseRef(ref); ok {
		return fmt.Sprintf("partition %d offset %d", p, o)
	}
	return ref
}

// progressBar draws moved/total, rate and ETA on one line.
type progressBar struct {
	w     io.Writer
	drawn bool
}

func (b *progressBar) update(p dlq.Progress) {
	const width = 30
	fill := width
	if p.Total > 0 {
		fill = p.Moved * width / p.Total
	}
	pace := "" // no rate until there is one (dlq.Progress.Rate)
	if p.Rate > 0 {
		pace = fmt.Sprintf("  %.1f/s  ETA %s", p.Rate, p.ETA.Round(time.Second))
	}
	fmt.Fprintf(b.w, "\r[%s%s] %d/%d%s   ", strings.Repeat("#", fill), strings.Repeat(".", width-fill), p.Moved, p.Total, pace)
	b.drawn = true
}

func (b *progressBar) done() {
	if b != nil && b.drawn {
		fmt.Fprintln(b.w)
	}
}

// countRecords is "1 record" or "n records".
func countRecords(n int) string {
	if n == 1 {
		return "1 record"
	}
	return fmt.Sprintf("%d records", n)
}
