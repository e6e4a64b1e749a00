package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/parking"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/flow"
)

// parkedKey is one row of `kretry parking list`: a key's state in one
// parking partition, as the partition's owner would rebuild it.
type parkedKey struct {
	Partition int32  `json:"partition"`
	Key       string `json:"key"`     // as printed: text, or 0x… hex; "(whole partition)" with ordering partition
	KeyBytes  []byte `json:"key_b64"` // the key's bytes (base64 in JSON)
	State     string `json:"state"`   // blocked, releasing, held, dead-lettering
	Parked    int    `json:"parked"`  // parked records not yet delivered or dead-lettered
	Head      string `json:"head,omitempty"`
}

// cmdParkingList is `kretry parking list`: the keys parked or blocked in a
// topic's parking topic, with their state; held ones are those an
// operator releases (kretry parking release).
func cmdParkingList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := parkingListCmd.flagSet(stderr)
	path := configFlag(fs)
	topic := fs.String("topic", "", "source `TOPIC`, as in topics[].name (required)")
	heldOnly := fs.Bool("held", false, "only the keys held under on_dead_letter: hold, which wait for kretry parking release")
	asJSON := fs.Bool("json", false, "print a JSON array of the keys (partition, key, key_b64, state, parked, head)")
	if code, done := parkingListCmd.parse(fs, args, stdout, stderr); done {
		return code
	}
	if *topic == "" {
		fmt.Fprintln(stderr, "kretry parking list: --topic is required\nRun 'kretry parking list -h' for help.")
		return exitUsage
	}
	cfg, t, code := parkingConfig(parkingListCmd, *path, *topic, stderr)
	if code != exitOK {
		return code
	}
	kc, cl, code := parkingClients(ctx, parkingListCmd, cfg, stderr)
	if code != exitOK {
		return code
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	keys, err := readParking(cctx, kc, cl, t, func(*kgo.Record) bool { return true })
	if err != nil {
		fmt.Fprintf(stderr, "kretry parking list: %v\n", err)
		return exitFail
	}
	rows := parkedKeys(keys, t.Ordering == flow.OrderingPartition)
	notHeld := 0 // left out by --held
	if *heldOnly {
		all := len(rows)
		rows = slices.DeleteFunc(rows, func(r parkedKey) bool { return r.State != parking.Held.String() })
		notHeld = all - len(rows)
	}
	if *asJSON {
		if err := json.NewEncoder(stdout).Encode(rows); err != nil {
			return exitFail
		}
		return exitOK
	}
	printParked(stdout, rows, notHeld, t, *path)
	return exitOK
}

// parkedKeys are the rows of the keys that are not idle, by partition and
// key. With wholePartition (ordering partition) each partition has one
// lane, named "(whole partition)".
func parkedKeys(keys map[int32]map[string]*parking.Lookup, wholePartition bool) []parkedKey {
	rows := []parkedKey{}
	for p, ks := range keys {
		for k, l := range ks {
			st := l.State()
			if st == parking.Idle {
				continue
			}
			name := printable([]byte(k), 1<<30) // whole: it is given back to release
			if wholePartition {
				name = "(whole partition)"
			}
			rows = append(rows, parkedKey{Partition: p, Key: name, KeyBytes: []byte(k),
				State: st.String(), Parked: l.Parked(), Head: l.Head()})
		}
	}
	slices.SortFunc(rows, func(a, b parkedKey) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Key, b.Key))
	})
	return rows
}

// printParked prints rows, the keys of t's parking topic, as a table,
// with the command that releases a held one; notHeld keys that are not
// idle were left out by --held.
func printParked(w io.Writer, rows []parkedKey, notHeld int, t *config.Topic, path string) {
	parkingTopic := t.Parking.Topic
	switch {
	case len(rows) == 0 && notHeld > 0:
		// Not "nothing parked": a key whose record is still in a tier is
		// not held yet (a newcomer polling --held read it so).
		fmt.Fprintf(w, "no key is held in %s (%d not held yet or no more: blocked, releasing or dead-lettering; kretry parking list without --held shows them)\n", parkingTopic, notHeld)
		return
	case len(rows) == 0:
		fmt.Fprintf(w, "no key is parked or blocked in %s\n", parkingTopic)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tKEY\tSTATE\tPARKED\tHEAD IN A TIER")
	held := 0
	for _, r := range rows {
		if r.State == parking.Held.String() {
			held++
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\n", r.Partition, r.Key, r.State, r.Parked, orDash(r.Head))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d keys in %s, %d held", len(rows), parkingTopic, held)
	switch {
	case held > 0 && t.Ordering == flow.OrderingPartition:
		fmt.Fprintf(w, ": release one with kretry parking release -c %s --topic %s --partition N", shellWord(path), t.Name)
	case held > 0:
		fmt.Fprintf(w, ": release one with kretry parking release -c %s --topic %s --key KEY (--key-hex HEX for a key shown as 0x…)", shellWord(path), t.Name)
	}
	fmt.Fprintln(w)
}
