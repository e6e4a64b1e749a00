package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/sidecar"
	"github.com/kretry/kretry/internal/topicread"
	"github.com/kretry/kretry/parking"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/flow"
)

// cmdParking is `kretry parking release`: it writes an operator release op
// for one key to the topic's parking topic; the instance that owns the
// partition delivers the key's parked records (a key held under
// on_dead_letter: hold).
func cmdParking(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(stderr, missingSubcommand("parking", []string{"list", "release"}))
		parkingCmd.help(stderr, nil)
		return exitUsage
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help":
		parkingCmd.help(stdout, nil)
		return exitOK
	case args[0] == "list":
		return cmdParkingList(ctx, args[1:], stdout, stderr)
	case args[0] != "release":
		fmt.Fprint(stderr, unknownSubcommand("parking", args[0], []string{"list", "release"}))
		return exitUsage
	}
	fs := parkingReleaseCmd.flagSet(stderr)
	path := configFlag(fs)
	topic := fs.String("topic", "", "source `TOPIC`, as in topics[].name (required)")
	keyText := fs.String("key", "", "record `KEY` to release, its bytes as given (this or --key-hex is required, but with ordering partition and --partition)")
	keyHex := fs.String("key-hex", "", "the key's bytes in `HEX`, as kretry parking list prints a binary key (0x…)")
	partition := fs.Int("partition", -1, "write the release to parking partition `N` only; default: to every partition where the key is parked (found by reading the parking topic)")
	if code, done := parkingReleaseCmd.parse(fs, args[1:], stdout, stderr); done {
		return code
	}
	if *topic == "" {
		fmt.Fprintln(stderr, "kretry parking release: --topic is required\nRun 'kretry parking release -h' for help.")
		return exitUsage
	}
	key, hasKey, err := releaseKey(fs, *keyText, *keyHex)
	if err == nil && !hasKey && *partition < 0 {
		err = errKeyRequired
	}
	if err != nil {
		fmt.Fprintf(stderr, "kretry parking release: %v\nRun 'kretry parking release -h' for help.\n", err)
		return exitUsage
	}
	if *partition < -1 {
		fmt.Fprintf(stderr, "kretry parking release: --partition %d: want a partition (0 or more), or -1 for wherever the key is parked\n", *partition)
		return exitUsage
	}
	cfg, t, code := parkingConfig(parkingReleaseCmd, *path, *topic, stderr)
	if code != exitOK {
		return code
	}
	if !hasKey && (t.Ordering != flow.OrderingPartition || *partition < 0) {
		fmt.Fprintf(stderr, "kretry parking release: %v\nRun 'kretry parking release -h' for help.\n", errKeyRequired)
		return exitUsage
	}
	return release(ctx, cfg, t, key, *partition, stdout, stderr)
}

// errKeyRequired: parking release names no key, and not a partition of a
// topic with ordering partition either.
var errKeyRequired = errors.New("--key KEY (or --key-hex HEX) is required; with ordering partition, --partition N alone names the partition")

// releaseKey is the key --key or --key-hex give (hex with or without a 0x
// prefix), and whether one was given: an empty --key is a key, the empty
// one.
func releaseKey(fs *flag.FlagSet, text, hexKey string) ([]byte, bool, error) {
	switch {
	case isSet(fs, "key") && isSet(fs, "key-hex"):
		return nil, false, errors.New("--key and --key-hex name the same thing: give one")
	case isSet(fs, "key-hex"):
		b, err := hex.DecodeString(strings.TrimPrefix(hexKey, "0x"))
		if err != nil {
			return nil, false, fmt.Errorf("--key-hex %q: want the key's bytes in hex, such as 0x4bff01 (%v)", hexKey, err)
		}
		return b, true, nil
	case isSet(fs, "key"):
		return []byte(text), true, nil
	}
	return nil, false, nil
}

// release writes the operator release of key to the parking partitions
// where it is held: partition only when it is 0 or more, else every one
// where the key is found (releasePartitions). It says on stdout where each
// release went, and on stderr why a partition got none. It returns the
// command's exit code.
func release(ctx context.Context, cfg *config.Config, t *config.Topic, key []byte, partition int, stdout, stderr io.Writer) int {
	kc, cl, code := parkingClients(ctx, parkingReleaseCmd, cfg, stderr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if code != exitOK {
		return code
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	parts, code := releasePartitions(cctx, kc, cl, t, key, partition, stderr)
	if code != exitOK {
		return code
	}
	for _, p := range parts {
		r := parking.OperatorRelease(t.Parking.Topic, p, key)
		if err := cl.ProduceSync(cctx, r).FirstErr(); err != nil {
			fmt.Fprintf(stderr, "kretry parking release: %v\n", err)
			return exitFail
		}
		fmt.Fprintf(stdout, "release of key %q written to %s partition %d; the owner of that partition delivers its parked records\n",
			key, t.Parking.Topic, p)
	}
	return exitOK
}

// parkingConfig loads the config at path for command cmd and returns it
// with source topic name's entry (parkingTopicOf); a code other than
// exitOK is the command's, said on stderr.
func parkingConfig(cmd *command, path, name string, stderr io.Writer) (*config.Config, *config.Topic, int) {
	cfg, code := loadConfig(cmd, path, stderr)
	if code != exitOK {
		return nil, nil, code
	}
	t, code := parkingTopicOf(cmd, cfg, name, path, stderr)
	return cfg, t, code
}

// parkingClients are command cmd's clients for cfg's brokers: kc, whose
// readers the parking lookups make, and a client with opts (the caller
// closes it). A code other than exitOK is the command's, said on stderr.
func parkingClients(ctx context.Context, cmd *command, cfg *config.Config, stderr io.Writer, opts ...kgo.Opt) (*sidecar.Clients, *kgo.Client, int) {
	kc, err := commandClients(ctx, cfg, stderr)
	if err == nil {
		var cl *kgo.Client
		if cl, err = kc.New(opts...); err == nil {
			return kc, cl, exitOK
		}
	}
	fmt.Fprintf(stderr, "kretry %s: %v\n", cmd.name, err)
	return nil, nil, exitFail
}

// parkingTopicOf is source topic name's config, which must park (exit
// code exitUsage, said on stderr for command cmd, when it is not in the
// config at path or has ordering none).
func parkingTopicOf(cmd *command, cfg *config.Config, name, path string, stderr io.Writer) (*config.Topic, int) {
	var t *config.Topic
	var known []string
	for i := range cfg.Topics {
		c := &cfg.Topics[i]
		switch {
		case c.Name == name:
			t = c
		case name == c.Parking.Topic || name == c.DLQ.Topic || slices.Contains(c.Retry.Topics, name):
			fmt.Fprintf(stderr, "kretry %s: %q is a topic of %q's pipeline, not its source: pass --topic %s\n", cmd.name, name, c.Name, c.Name)
			return nil, exitUsage
		}
		known = append(known, c.Name)
	}
	if t == nil {
		fmt.Fprintf(stderr, "kretry %s: topic %q is not a topics[].name of %s (known: %s)\n", cmd.name, name, path, strings.Join(known, ", "))
		return nil, exitUsage
	}
	if !t.Ordering.Parks() {
		fmt.Fprintf(stderr, "kretry %s: topic %q has ordering none: nothing is ever parked\n", cmd.name, name)
		return nil, exitUsage
	}
	return t, exitOK
}

// releasePartitions is where to write the release of key: the parking
// partitions where the key is held (parking.Lookup), only partition when
// it is 0 or more (checked against the parking topic). A partition where a
// release would change nothing (the key's head still in a retry tier, its
// records already released or on their way to the DLQ) gets none, with
// the reason on stderr; when no partition is left the command fails. A
// --partition where the key is found nowhere gets the release anyway (the
// lookup reads the topic as it is now), said so. A code other than exitOK
// is the command's, said on stderr.
func releasePartitions(ctx context.Context, kc *sidecar.Clients, cl *kgo.Client, t *config.Topic, key []byte, partition int, stderr io.Writer) ([]int32, int) {
	if partition >= 0 {
		n, err := partitionCount(ctx, cl, t.Parking.Topic)
		if err != nil {
			fmt.Fprintf(stderr, "kretry parking release: %v\n", err)
			return nil, exitFail
		}
		if partition >= n {
			fmt.Fprintf(stderr, "kretry parking release: --partition %d: %s has partitions 0–%d\n", partition, t.Parking.Topic, n-1)
			return nil, exitUsage
		}
	}
	// Producers do not agree on the key hash (Java and franz-go use
	// murmur2, librdkafka crc32), so find the key where it is parked.
	found, err := findParked(ctx, kc, cl, t, key, partition)
	if err != nil {
		fmt.Fprintf(stderr, "kretry parking release: %v\n", err)
		return nil, exitFail
	}
	where := slices.Sorted(maps.Keys(found))
	if partition >= 0 {
		if _, ok := found[int32(partition)]; !ok {
			if len(where) > 0 {
				fmt.Fprintf(stderr, "kretry parking release: key %q is not parked or blocked in %s partition %d, but in partition %s: drop --partition, or pass one of those; nothing written\n",
					key, t.Parking.Topic, partition, joinPartitions(where))
				return nil, exitFail
			}
			fmt.Fprintf(stderr, "kretry parking release: key %q is not parked or blocked in %s partition %d as the topic reads now; the release is written anyway (--partition), and releases the key only if it is held there when the partition's owner reads it\n",
				key, t.Parking.Topic, partition)
			return []int32{int32(partition)}, exitOK
		}
		where = []int32{int32(partition)}
	}
	if len(where) == 0 {
		fmt.Fprintf(stderr, "kretry parking release: key %q is not parked or blocked in %s (nothing to release; pass --partition to write anyway)\n", key, t.Parking.Topic)
		return nil, exitFail
	}
	var held []int32
	for _, p := range where {
		if why := notReleasable(found[p]); why != "" {
			fmt.Fprintf(stderr, "kretry parking release: key %q in %s partition %d: %s; nothing written there\n", key, t.Parking.Topic, p, why)
			continue
		}
		held = append(held, p)
	}
	if len(held) == 0 {
		return nil, exitFail
	}
	return held, exitOK
}

// notReleasable says why an operator release of a key in the state l read
// back would change nothing, "" when the key is held.
func notReleasable(l *parking.Lookup) string {
	switch l.State() {
	case parking.Held:
		return ""
	case parking.Blocked:
		return fmt.Sprintf("its record %s is still in a retry tier (%d parked behind it); a release applies once that record is dead-lettered and the key held (on_dead_letter: hold): run this again then. "+
			"If that tier is no longer in retry.tiers, nothing consumes it, so that record is never retried or dead-lettered (kretry run warns \"a tier topic no longer in retry.tiers still holds records\" at start, kretry lag notes it): put the tier back until it drains", l.Head(), l.Parked())
	case parking.Releasing:
		return fmt.Sprintf("not held: its %d parked records are being delivered already (released, or their head was delivered)", l.Parked())
	case parking.DeadLettering:
		return fmt.Sprintf("not held: its %d parked records are on their way to the DLQ (on_dead_letter: dead_letter)", l.Parked())
	}
	return "not held: nothing of it is parked there any more"
}

// joinPartitions is "1" or "1, 2".
func joinPartitions(ps []int32) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ", ")
}

// partitionCount returns how many partitions topic has.
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	tds, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w", topic, err)
	}
	td, ok := tds[topic]
	if !ok || td.Err != nil {
		if ok && td.Err != nil {
			err = td.Err
		} else {
			err = errors.New("not found")
		}
		return 0, fmt.Errorf("listing %s: %w", topic, err)
	}
	return len(td.Partitions), nil
}

// findParked returns the parking partitions holding records or ops of key
// past the group's committed offsets, each with the state of key's lane
// there (readParking): with ordering partition the partition's one lane,
// whose ops carry an empty key, in the partitions where key's records are
// and in partition (-1: none).
func findParked(ctx context.Context, kc *sidecar.Clients, cl *kgo.Client, t *config.Topic, key []byte, partition int) (map[int32]*parking.Lookup, error) {
	lane := laneKey(t, key)
	seen := map[int32]bool{}
	lanes, err := readParking(ctx, kc, cl, t, func(r *kgo.Record) bool {
		if string(r.Key) == string(key) {
			seen[r.Partition] = true
		}
		return laneKey(t, r.Key) == lane
	})
	if err != nil {
		return nil, err
	}
	found := map[int32]*parking.Lookup{}
	for p, ls := range lanes {
		if seen[p] || t.Ordering != flow.OrderingPartition || int(p) == partition {
			found[p] = ls[lane]
		}
	}
	return found, nil
}

// laneKey is the key of the engine's lane that a parking record of key
// belongs to: the key, or "" for every record with ordering partition (one
// lane per partition; engine.laneFor).
func laneKey(t *config.Topic, key []byte) string {
	if t.Ordering == flow.OrderingPartition {
		return ""
	}
	return string(key)
}

// readParking reads t's parking topic past the group's committed offsets,
// up to each partition's last stable offset when called, and returns the
// state of each lane (laneKey) of the records that want accepts, by
// partition and lane key. cl is the command's client; the reader of the
// parking topic is a second client from kc (same TLS, SASL and seed
// brokers), as it consumes.
func readParking(ctx context.Context, kc *sidecar.Clients, cl *kgo.Client, t *config.Topic, want func(r *kgo.Record) bool) (map[int32]map[string]*parking.Lookup, error) {
	adm := kadm.NewClient(cl)
	offs, err := adm.FetchOffsets(ctx, t.Group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("reading the committed offsets of group %q: %w", t.Group, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, t.Parking.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", t.Parking.Topic, err)
	}
	from, end := map[int32]int64{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		from[o.Partition], end[o.Partition] = 0, o.Offset
		if c, ok := offs.Lookup(t.Parking.Topic, o.Partition); ok && c.At > 0 {
			from[o.Partition] = c.At
		}
	})
	found := map[int32]map[string]*parking.Lookup{}
	err = topicread.Range(ctx, kc.Opts(), t.Parking.Topic, true, from, end, func(r *kgo.Record) {
		if !want(r) {
			return
		}
		ks := found[r.Partition]
		if ks == nil {
			ks = map[string]*parking.Lookup{}
			found[r.Partition] = ks
		}
		k := laneKey(t, r.Key)
		l := ks[k]
		if l == nil {
			l = &parking.Lookup{}
			ks[k] = l
		}
		l.Add(r)
	})
	if err != nil {
		return nil, err
	}
	return found, nil
}
