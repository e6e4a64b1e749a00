package engine

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestAuthFailingEpisodes drives authFailing with polls at given seconds,
// each refused (r) or clean (c), and checks when it gives up: refusals
// end only after polls have gone authFailureGap without one, and a loop
// held between two refusals (no poll between them) is no gap.
func TestAuthFailingEpisodes(t *testing.T) {
	refused := fmt.Errorf("unable to join group session: %w", kerr.SaslAuthenticationFailed)
	type poll struct {
		at      float64 // seconds from the start
		refused bool
	}
	// every returns polls from..to step apart, refused or clean.
	every := func(from, to, step float64, r bool) []poll {
		var ps []poll
		for at := from; at <= to; at += step {
			ps = append(ps, poll{at, r})
		}
		return ps
	}
	cat := func(pss ...[]poll) []poll {
		var all []poll
		for _, ps := range pss {
			all = append(all, ps...)
		}
		return all
	}
	cases := []struct {
		name  string
		polls []poll
		want  float64 // when it gives up; -1: it does not
	}{
		{"refused every 5s (franz-go's join backoff)", every(0, 60, 5, true), 30},
		{"refused every 15s, clean polls between (a slow join on a loaded broker)",
			cat(every(0, 60, 15, true), every(1, 59, 1, false)), 30},
		{"refused, clean for 20s, refused again: a new episode",
			cat([]poll{{0, true}, {10, true}}, every(11, 30, 1, false), every(31, 90, 5, true)), 61},
		{"refused twice 25s apart with the loop held between", []poll{{0, true}, {25, true}, {31, true}}, 31},
		{"one refusal an hour", []poll{{0, true}, {1800, false}, {3600, true}, {5400, false}, {7200, true}}, -1},
		{"refusals that stop after 25s", cat(every(0, 25, 5, true), every(26, 120, 1, false)), -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := &Engine{core: core{log: slog.New(slog.NewTextHandler(io.Discard, nil)), opts: Options{authLimit: authFailureLimit}}}
			start := time.Unix(1_700_000_000, 0)
			polls := slices.Clone(tc.polls)
			slices.SortStableFunc(polls, func(a, b poll) int { return cmp.Compare(a.at, b.at) })
			got := -1.0
			for _, p := range polls {
				var err error
				if p.refused {
					err = refused
				}
				if out := e.authFailing(err, start.Add(time.Duration(p.at*float64(time.Second)))); out != nil {
					if !errors.Is(out, ErrAuthFailed) || !errors.Is(out, kerr.SaslAuthenticationFailed) {
						t.Fatalf("gave up with %v; want ErrAuthFailed wrapping the refusal", out)
					}
					got = p.at
					break
				}
			}
			if got != tc.want {
				t.Errorf("gave up at %vs, want %vs (-1: never)", got, tc.want)
			}
		})
	}
}
