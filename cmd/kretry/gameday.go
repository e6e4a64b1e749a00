package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/kretry/kretry/internal/gameday"
)

var gamedayCmd = &command{
	name:     "gameday",
	synopsis: "gameday [--quick] [--brokers HOST:PORT,…] [--chart FILE] [--json] [--peers kretry,blocking] [--quiet]",
	purpose:  "a backlog game day: spike, slow then failing dependency, poison, synchronised failure; checks that the queue slows, isolates and recovers",
	about: `Runs kretry, then the blocking-retry peer, through the same phases
against a sample app whose dependency it controls: steady load; a producer
spike above the drain rate; the dependency slowing, then failing (503) for
longer than the tier chain; one poison record; hundreds of records failing
together. It checks with numbers that the queue slows (source paused,
nothing dead-lettered by the outage, retries within budget), isolates
(poison in the DLQ after bounded attempts, healthy keys' p99 bounded) and
recovers (lag back to 0 in time, retries spread, nothing lost), answers the
four on-call questions and writes a chart over time (--chart). The exit
status is 1 when a kretry check fails; the blocking peer's checks are shown
for contrast. Without --brokers it runs on an in-memory embedded broker.`,
	example: "kretry gameday --quick\nkretry gameday --chart gameday.html --json > gameday.json\nkretry gameday --brokers 127.0.0.1:9092",
}

func cmdGameday(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := gamedayCmd.flagSet(stderr)
	quick := fs.Bool("quick", false, "the short plan: about a minute for both peers (default: the full plan, several minutes)")
	brokers := fs.String("brokers", "", "comma-separated `HOST:PORT` list of real brokers (default: an in-memory embedded broker)")
	chart := fs.String("chart", "gameday.html", "write the chart (self-contained HTML with SVG) to `FILE`; \"\" writes none")
	asJSON := fs.Bool("json", false, "print the report as one JSON object")
	peers := fs.String("peers", strings.Join(gameday.PeerNames, ","), "comma-separated `LIST` of peers to run, in order")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if code, done := gamedayCmd.parse(fs, args, stdout, stderr); done {
		return code
	}
	o := gameday.Options{Plan: gameday.Full(), Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	if *quick {
		o.Plan = gameday.Quick()
	}
	for _, b := range strings.Split(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.Brokers = append(o.Brokers, b)
		}
	}
	for _, p := range strings.Split(*peers, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(gameday.PeerNames, p) {
			fmt.Fprintf(stderr, "kretry gameday: --peers: unknown peer %q: use %s\n", p, strings.Join(gameday.PeerNames, ", "))
			return exitUsage
		}
		o.Peers = append(o.Peers, p)
	}
	if !*quiet {
		o.Progress = stderr
	}
	r, err := gameday.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "kretry gameday: %v\n", err)
		return exitFail
	}
	if *chart != "" {
		if err := os.WriteFile(*chart, gameday.Chart(r), 0o644); err != nil {
			fmt.Fprintf(stderr, "kretry gameday: --chart: %v\n", err)
			return exitFail
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		if err := enc.Encode(r); err != nil {
			fmt.Fprintf(stderr, "kretry gameday: %v\n", err)
			return exitFail
		}
	} else {
		r.Print(stdout)
		if *chart != "" {
			fmt.Fprintf(stdout, "chart: %s\n", *chart)
		}
	}
	if !r.OK {
		return exitFail
	}
	return exitOK
}
