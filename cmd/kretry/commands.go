package main

// The commands' documentation: what `kretry CMD -h`, `kretry help CMD` and
// the top-level usage print (the command type and its printing are in
// help.go).

var (
	runCmd = &command{
		name:     "run",
		synopsis: "run -c FILE",
		purpose:  "run the sidecar until SIGTERM/SIGINT",
		about: `Consumes every topics[] entry of the config, delivers each record to
app.url and moves failures through the retry tiers, parking and the DLQ.
With kafka.brokers [embedded] it runs the embedded broker too, on
embedded.listen with its log in embedded.data_dir (locked: one process
per data dir). On SIGTERM/SIGINT it stops starting deliveries, waits up to
app.timeout for those in flight, commits and exits 0; a second signal
exits at once (status 1) without waiting.`,
		example: "kretry run -c config.yaml\nKRETRY_KAFKA__BROKERS=127.0.0.1:9092 kretry run -c config.yaml",
		short:   map[string]string{"config": "c"},
	}
	demoCmd = &command{
		name:     "demo",
		synopsis: "demo [--records N] [--json] [--quiet]",
		purpose:  "the whole job on an embedded broker, with a sample app that fails on purpose",
		about: `Starts an in-memory embedded broker, a sample HTTP app that fails some
records on purpose, produces keyed order records, runs the sidecar with
short tiers and reports what became of every record. The exit status is 0
only when nothing was lost, duplicated in the DLQ or delivered out of
order.`,
		example: "kretry demo\nkretry demo --records 500 --json --quiet",
	}
	brokerCmd = &command{
		name:     "broker",
		synopsis: "broker [--listen ADDR] [--data-dir DIR] [--partitions N]",
		purpose:  "run the embedded Kafka-protocol broker alone, for kcat and your app",
		about: `Serves the Kafka protocol (franz-go's kfake) until SIGTERM/SIGINT. The
data dir is locked: a second broker or ` + "`kretry run`" + ` on it is refused. For
development and demos, not production data.`,
		example: "kretry broker --listen 127.0.0.1:9092 --data-dir .kretry/data",
	}
	validateCmd = &command{
		name:     "validate",
		synopsis: "validate -c FILE",
		purpose:  "check a config and exit: 0 when valid, 2 with every error found",
		about: `Loads the file with the KRETRY_ environment overrides applied, as
` + "`kretry run`" + ` would, and prints every problem with its key path and value.
Warnings (a group or topic name that looks like another topic's default,
left over from a rename) go to stderr and do not change the exit status.`,
		example: "kretry validate -c config.yaml",
		short:   map[string]string{"config": "c"},
	}
	lagCmd = &command{
		name:     "lag",
		synopsis: "lag -c FILE [--json] [--watch [--interval DURATION]] [--metrics URL]…",
		purpose:  "print the consumer lag, age and status of kretry's groups and DLQs, and each pipeline's overload signals",
		about: `Needs the brokers of the config: with kafka.brokers [embedded] it dials
embedded.listen, where ` + "`kretry run`" + ` or ` + "`kretry broker`" + ` must be running.
The status (OK, WARN, STALL, STOP, ERR) needs lag.window scans, and the
enqueue, drain, tier and DLQ rates two scans: use --watch. The breaker,
in-flight limit, retry share, budget and top failures come from a running
instance's /metrics (metrics.listen, or --metrics URL).
One scan exits 1 when it could not measure everything.`,
		example: "kretry lag -c config.yaml\nkretry lag -c config.yaml --watch --interval 10s --metrics 10.0.0.7:9464",
		short:   map[string]string{"config": "c"},
	}
	parkingCmd = &command{
		name:     "parking",
		synopsis: "parking list|release -c FILE --topic TOPIC …",
		purpose:  "operator actions on parking topics",
		about: `Subcommands:
  list      the keys parked or blocked, with their state (held ones wait for release)
  release   release a key held in parking (on_dead_letter: hold)

Run 'kretry parking list -h' or 'kretry parking release -h' for their flags.`,
		example: "kretry parking list -c config.yaml --topic orders --held",
	}
	parkingListCmd = &command{
		name:     "parking list",
		synopsis: "parking list -c FILE --topic TOPIC [--held] [--json]",
		purpose:  "list the keys parked or blocked, with their state",
		about: `Reads the topic's parking topic past its group's committed offsets, as
the partition's owner replays it on assignment, and prints each key that
is not idle: its partition, state (blocked: a record of the key is still
in a retry tier, its HEAD; held: that record was dead-lettered under
on_dead_letter: hold and the parked records wait for kretry parking
release; releasing: they are being delivered; dead-lettering: they
follow it to the DLQ), and how many records are parked. It needs the
brokers: with kafka.brokers [embedded] it dials embedded.listen, where
` + "`kretry run`" + ` or ` + "`kretry broker`" + ` must be running.`,
		example: "kretry parking list -c config.yaml --topic orders --held",
		short:   map[string]string{"config": "c"},
	}
	parkingReleaseCmd = &command{
		name:     "parking release",
		synopsis: "parking release -c FILE --topic TOPIC (--key KEY | --key-hex HEX) [--partition N]",
		purpose:  "release a key held in parking (on_dead_letter: hold)",
		about: `Writes a release op for the key to the topic's parking topic; the
instance that owns that partition then delivers the key's parked records
in order. It finds the parking partition(s) where the key is parked
(producers do not agree on the key hash; --partition narrows it to one)
and writes only where the key is held: a key whose record is still in a
retry tier, whose parked records are already being released or go to the
DLQ, or that is parked nowhere exits 1 with the reason, nothing written
(kretry parking list shows each key's state). A --partition the parking
topic does not have exits 2; one where the key is found nowhere gets the
release anyway, said so. It needs the brokers: with kafka.brokers
[embedded] it dials embedded.listen, where ` + "`kretry run`" + ` or ` + "`kretry broker`" + `
must be running.`,
		example: "kretry parking release -c config.yaml --topic orders --key customer-42",
		short:   map[string]string{"config": "c"},
	}
	dlqCmd = &command{
		name:     "dlq",
		synopsis: "dlq list|show|stats|redrive|discard -c FILE --topic TOPIC …",
		purpose:  "inspect a DLQ, redrive its records into the pipeline or discard them",
		about: `Subcommands:
  list      the records waiting in the DLQ (or redriven, discarded), filtered
  show      one record: every header and the value
  stats     counts by error class, status and error fingerprint, oldest age
  redrive   move records back into kretry's pipeline, exactly once, paced
  discard   mark records handled without delivering them (kept for audit)

Run 'kretry dlq SUBCOMMAND -h' for its flags. docs/DLQ.md describes the
marks topic, the lease and what the app sees.`,
		example: "kretry dlq list -c config.yaml --topic orders --class permanent",
	}
	dlqListCmd = &command{
		name:     "dlq list",
		synopsis: "dlq list -c FILE --topic TOPIC [--state STATE] [--class CLASSES] [--status STATUSES] [--since TIME] [--until TIME] [--key KEY] [--header K=V] [--grep TEXT] [--record P/O] [--limit N] [--newest] [--json]",
		purpose:  "list the records of a DLQ, waiting ones by default",
		about: `Reads the DLQ and its marks topic (<dlq>.marks) to their last stable
offsets. Filters combine (all must match). Keys and messages that are not
printable text are shown in hex.`,
		example: "kretry dlq list -c config.yaml --topic orders --status 422 --since 2h",
		short:   map[string]string{"config": "c"},
	}
	dlqShowCmd = &command{
		name:     "dlq show",
		synopsis: "dlq show -c FILE --topic TOPIC (--record P/O | [--partition N] --offset N) [--json]",
		purpose:  "print one DLQ record: every header and the value",
		about:    `Text (valid UTF-8 without control characters other than tab, newline and CR) is printed as is, anything else in hex (--json and the admin API: base64).`,
		example:  "kretry dlq show -c config.yaml --topic orders --record 1/42",
		short:    map[string]string{"config": "c"},
	}
	dlqStatsCmd = &command{
		name:     "dlq stats",
		synopsis: "dlq stats -c FILE --topic TOPIC [--json]",
		purpose:  "what is in a DLQ at a glance: counts by class, status, fingerprint; oldest age",
		example:  "kretry dlq stats -c config.yaml --topic orders",
		short:    map[string]string{"config": "c"},
	}
	dlqRedriveCmd = &command{
		name:     "dlq redrive",
		synopsis: "dlq redrive -c FILE --topic TOPIC [--class CLASSES] [--status STATUSES] [--since TIME] [--until TIME] [--key KEY] [--header K=V] [--grep TEXT] [--record P/O] [--limit N] [--rate N] [--dry-run] [--by NAME] [--quiet] [--json]",
		purpose:  "move waiting DLQ records back into kretry's pipeline, exactly once",
		about: `Each selected waiting record goes onto the topic's first retry tier, due
at once, and the app sees it again with its original ce-id, key, value and
headers, ce-attempt 1 and kretry-redrive-count / kretry-redrive-id. The
copy and the record's mark commit in one transaction: Ctrl-C stops cleanly
with the count so far, and the same command again continues without
moving anything twice. A second redrive or discard of the same DLQ while
one runs is refused, naming it. Records without readable kretry headers
are refused with the reason (exit 1); discard them instead.`,
		example: "kretry dlq redrive -c config.yaml --topic orders --class permanent --status 422 --rate 5 --dry-run",
		short:   map[string]string{"config": "c"},
	}
	dlqDiscardCmd = &command{
		name:     "dlq discard",
		synopsis: "dlq discard -c FILE --topic TOPIC --reason TEXT [--class CLASSES] [--status STATUSES] [--since TIME] [--until TIME] [--key KEY] [--header K=V] [--grep TEXT] [--record P/O] [--limit N] [--rate N] [--dry-run] [--by NAME] [--quiet] [--json]",
		purpose:  "mark waiting DLQ records handled without delivering them",
		about: `Writes a mark per record (who, when, the reason) to the marks topic; the
records stay in the DLQ for audit and no longer count as waiting.`,
		example: "kretry dlq discard -c config.yaml --topic orders --grep 'unknown customer' --reason 'customers deleted (TICKET-12)'",
		short:   map[string]string{"config": "c"},
	}
	versionCmd = &command{
		name:     "version",
		synopsis: "version",
		purpose:  "print the kretry version and the Go version it was built with",
		example:  "kretry version",
	}
	helpCmd = &command{
		name:     "help",
		synopsis: "help [COMMAND]",
		purpose:  "print this help, or a command's",
		example:  "kretry help run\nkretry run -h",
	}
)

// commands in the order of the top-level usage.
var commands = []*command{runCmd, demoCmd, gamedayCmd, brokerCmd, validateCmd, lagCmd, parkingListCmd, parkingReleaseCmd,
	dlqListCmd, dlqShowCmd, dlqStatsCmd, dlqRedriveCmd, dlqDiscardCmd, versionCmd, helpCmd}

// dlqSubcommands are the subcommands of `kretry dlq`.
var dlqSubcommands = map[string]*command{"list": dlqListCmd, "show": dlqShowCmd, "stats": dlqStatsCmd, "redrive": dlqRedriveCmd, "discard": dlqDiscardCmd}
