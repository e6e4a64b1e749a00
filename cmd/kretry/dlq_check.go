package main

// The dlq subcommands' flag checks: each flag read into the dlq.Filter
// (or refused with what to write instead) before any broker is asked.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/pkg/config"
)

// check validates the flags into f.filter.
func (f *dlqFlags) check() error {
	if *f.topic == "" {
		return errors.New("--topic is required")
	}
	if f.sub == dlqShowCmd {
		if isSet(f.fs, "record") && (isSet(f.fs, "partition") || isSet(f.fs, "offset")) {
			return errors.New("--record P/O names the partition and the offset: give it, or --partition and --offset, not both")
		}
		if *f.partition < 0 {
			return fmt.Errorf("--partition %d: want a partition of 0 or more, as kretry dlq list prints it", *f.partition)
		}
		if *f.offset < 0 {
			return errors.New("--record P/O (or --offset N) is required: the DLQ record, as kretry dlq list prints it")
		}
		f.filter.Records = []string{strconv.Itoa(*f.partition) + "/" + strconv.FormatInt(*f.offset, 10)}
		return nil
	}
	if f.classes == nil {
		return nil
	}
	if *f.limit < 0 {
		return fmt.Errorf("--limit %d: want 0 (all) or more", *f.limit)
	}
	if f.by != nil && strings.TrimSpace(*f.by) == "" {
		return errors.New("--by is empty: want a name, recorded as who did it (default $USER@host)")
	}
	if f.rate != nil && *f.rate < 0 {
		return fmt.Errorf("--rate %g: want records/s, or 0 for no limit", *f.rate)
	}
	if f.rate != nil {
		if err := dlq.CheckRate(*f.rate); err != nil {
			return fmt.Errorf("--rate: %w, or 0 for no limit", err)
		}
	}
	if f.reason != nil && strings.TrimSpace(*f.reason) == "" {
		return errors.New("--reason TEXT is required: say why these records are not delivered (kept for audit)")
	}
	return f.checkFilter()
}

// checkFilter validates the filter flags into f.filter.
func (f *dlqFlags) checkFilter() error {
	fl := &f.filter
	if *f.classes != "" {
		fl.Classes = strings.Split(*f.classes, ",")
		if err := dlq.ParseClasses(fl.Classes); err != nil {
			return fmt.Errorf("--class: %w", err)
		}
	}
	if err := f.checkStatuses(); err != nil {
		return err
	}
	if err := f.checkWindow(); err != nil {
		return err
	}
	if isSet(f.fs, "key") {
		fl.Key, fl.HasKey = []byte(*f.key), true
	}
	fl.Text = *f.grep
	for _, h := range f.headers {
		m, err := dlq.ParseHeaderMatch(h)
		if err != nil {
			return fmt.Errorf("--header: %w", err)
		}
		fl.Headers = append(fl.Headers, m)
	}
	for _, r := range splitAll(f.records) {
		if err := dlq.ParseRecord(r); err != nil {
			return fmt.Errorf("--record: %w", err)
		}
		fl.Records = append(fl.Records, r)
	}
	return f.checkStates()
}

// checkStatuses reads --status into f.filter.Statuses.
func (f *dlqFlags) checkStatuses() error {
	if *f.statuses == "" {
		return nil
	}
	for _, s := range strings.Split(*f.statuses, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 || n > 999 {
			return fmt.Errorf("--status %q: want HTTP statuses such as 422,503 (0: no status)", s)
		}
		f.filter.Statuses = append(f.filter.Statuses, n)
	}
	return nil
}

// checkWindow reads --since and --until into f.filter, at one instant:
// --since 2h --until 2h is an empty window, refused.
func (f *dlqFlags) checkWindow() error {
	fl := &f.filter
	var err error
	now := time.Now()
	if fl.Since, err = parseWhen(*f.since, now); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if fl.Until, err = parseWhen(*f.until, now); err != nil {
		return fmt.Errorf("--until: %w", err)
	}
	if !fl.Since.IsZero() && !fl.Until.IsZero() && !fl.Since.Before(fl.Until) {
		return fmt.Errorf("--since %s (%s) is not before --until %s (%s): no record can match; a duration counts back from now, so the larger one is the --since",
			*f.since, fl.Since.UTC().Format(time.RFC3339), *f.until, fl.Until.UTC().Format(time.RFC3339))
	}
	return nil
}

// checkStates reads --state into f.filter.States.
func (f *dlqFlags) checkStates() error {
	for _, s := range splitAll(f.states) {
		switch dlq.State(s) {
		case dlq.Waiting, dlq.Redriven, dlq.Discarded:
			f.filter.States = append(f.filter.States, dlq.State(s))
		case "all":
			f.filter.States = append(f.filter.States, dlq.Waiting, dlq.Redriven, dlq.Discarded)
		default:
			if s == "" {
				return errors.New(`--state "": want waiting, redriven, discarded or all (an empty value: a stray comma?)`)
			}
			return fmt.Errorf("--state %q: want waiting, redriven, discarded or all", s)
		}
	}
	return nil
}

// splitAll is the values of a repeatable flag, each also split at commas.
func splitAll(values []string) []string {
	var out []string
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			out = append(out, strings.TrimSpace(s))
		}
	}
	return out
}

// parseWhen reads an RFC 3339 time or a duration before now; "" is zero.
// Its error says what to write: the hours of a count of days, the zone a
// time lacks.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	switch {
	case err == nil:
		return t, nil
	case zoneless(s):
		return time.Time{}, fmt.Errorf("%q has no time zone: add Z for UTC (%sZ) or an offset (%s+01:00)", s, s, s)
	}
	if h, ok := config.DaysInHours(s); ok {
		return time.Time{}, fmt.Errorf("%q: a duration has no day unit, write %q (or an RFC 3339 time)", s, h)
	}
	return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time (2026-12-01T10:00:00Z) or a duration ago (2h)", s)
}

// zoneless reports whether s is an RFC 3339 time but for its zone.
func zoneless(s string) bool {
	_, err := time.Parse("2006-01-02T15:04:05.999999999", s)
	return err == nil
}
