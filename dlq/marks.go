package dlq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// MarksTopic is the marks topic of DLQ topic dlq: dlq + ".marks".
func MarksTopic(dlq string) string { return dlq + ".marks" }

// TransactionalID is the transactional id of every redrive and discard of
// DLQ topic dlq: one per DLQ, so that a new operation fences an older one.
func TransactionalID(dlq string) string { return "kretry-dlq-" + dlq }

// Actions: what became of a DLQ record (Mark.Action).
const (
	ActionRedrive = "redriven"
	ActionDiscard = "discarded"
)

// Mark is the value of a mark record, JSON.
type Mark struct {
	// Action is ActionRedrive or ActionDiscard.
	Action string `json:"action"`
	// ID is the ce-id of the DLQ record's original ("" when its kretry
	// headers are unreadable) and Timestamp its record timestamp (Unix
	// ms): the mark applies to the DLQ record with both.
	ID        string `json:"id"`
	Timestamp int64  `json:"ts"`
	// Op is the operation's id (a redrive id or a discard id).
	Op string `json:"op"`
	// By is who did it: the --by flag, $USER@host, or the admin API token's name.
	By string    `json:"by"`
	At time.Time `json:"at"`
	// To is where a redriven record went (topic/partition).
	To string `json:"to,omitempty"`
	// Reason is the operator's reason (discard).
	Reason string `json:"reason,omitempty"`
}

// markKey is the key of the mark of DLQ record p/offset.
func markKey(p int32, offset int64) string {
	return strconv.FormatInt(int64(p), 10) + "/" + strconv.FormatInt(offset, 10)
}

// parseMarkKey is the inverse of markKey.
func parseMarkKey(k string) (p int32, offset int64, ok bool) {
	ps, os, found := strings.Cut(k, "/")
	if !found {
		return 0, 0, false
	}
	pp, err1 := strconv.ParseInt(ps, 10, 32)
	oo, err2 := strconv.ParseInt(os, 10, 64)
	if err1 != nil || err2 != nil || pp < 0 || oo < 0 {
		return 0, 0, false
	}
	return int32(pp), oo, true
}

// markRecord is the mark record of e.
func markRecord(topic string, e *Entry, m Mark) *kgo.Record {
	m.ID, m.Timestamp = e.ID, e.Timestamp.UnixMilli()
	v, _ := json.Marshal(m) // a struct of strings, ints and a time: cannot fail
	return &kgo.Record{Topic: topic, Partition: 0, Key: []byte(markKey(e.Partition, e.Offset)), Value: v, Timestamp: m.At}
}

// newOpID returns an operation id: prefix, the UTC time to the second and 4
// random bytes, e.g. rd-20261201T183012Z-3f9a01c2.
func newOpID(prefix string, now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// ensureMarks creates the marks topic of dlq when it is missing: one
// partition, cleanup.policy compact (a mark must outlive nothing but its
// DLQ record, and there is one per record).
func ensureMarks(ctx context.Context, cl *kgo.Client, dlq string) error {
	adm := kadm.NewClient(cl)
	topic := MarksTopic(dlq)
	tds, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), topic) // past the metadata cache
	if err != nil {
		return fmt.Errorf("listing %s: %w", topic, err)
	}
	if td, ok := tds[topic]; ok && td.Err == nil {
		if len(td.Partitions) != 1 {
			return fmt.Errorf("marks topic %s has %d partitions, want 1 (it is kretry's: delete it only if the DLQ is empty, or every record becomes waiting again)", topic, len(td.Partitions))
		}
		return marksCompacted(ctx, adm, topic)
	}
	compact := "compact"
	_, err = adm.CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, topic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating marks topic %s: %w", topic, err)
	}
	return waitTopic(ctx, cl, topic)
}

// marksCompacted refuses a marks topic whose cleanup.policy is not
// exactly compact (an operator may create it, docs/DLQ.md): with delete
// in it, retention removes marks while their DLQ records stay, and those
// records are listed as waiting and moved a second time (found by a
// breaker helper: every record redriven twice after the marks' retention).
// A policy that cannot be read (no DescribeConfigs permission) is let be.
func marksCompacted(ctx context.Context, adm *kadm.Client, topic string) error {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return nil
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		return nil
	}
	for _, cf := range rc.Configs {
		if cf.Key == "cleanup.policy" && cf.Value != nil && *cf.Value != "compact" {
			return fmt.Errorf("%w: marks topic %s has cleanup.policy=%s, want compact: retention would remove marks while their DLQ records stay, and those records would be listed as waiting and moved again; "+
				"set it (kafka-configs.sh --bootstrap-server <broker> --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact) and run the command again; nothing moved",
				ErrMarksNotCompacted, topic, *cf.Value, topic)
		}
	}
	return nil
}

// waitTopic waits until topic's partitions answer ListOffsets (a topic just
// created on Kafka has no leader for a moment).
func waitTopic(ctx context.Context, cl *kgo.Client, topic string) error {
	adm := kadm.NewClient(cl)
	for {
		cl.ForceMetadataRefresh()
		offs, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = offs.Error()
		}
		if err == nil && len(offs[topic]) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for topic %s to be served: %w (last: %v)", topic, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitMarksStable waits (at most 10s) until the marks topic's last stable
// offset reaches its high watermark as of the call: Kafka answers EndTxn
// before it writes the commit markers, so a Read right after a move could
// otherwise miss its marks and list moved records as waiting. A timeout is
// logged, not returned: the move itself committed.
func (c *Client) waitMarksStable(ctx context.Context) {
	if _, err := c.marksStable(ctx); err != nil {
		c.log.Warn("dlq: the marks of the last move are not yet readable; a list right now may show moved records as waiting", "topic", MarksTopic(c.t.DLQ), "err", err)
	}
}

// errMarksOpenTxn is returned by marksStable when the marks topic's last
// stable offset stays below its high watermark: a transaction on it is
// still open.
var errMarksOpenTxn = errors.New("a transaction on the marks topic is still open")

// marksStable waits (at most 10s) until the marks topic's last stable
// offset reaches its high watermark as of the call. It returns the last
// stable offset seen, and errMarksOpenTxn (or the listing's error) when
// it does not get there.
func (c *Client) marksStable(ctx context.Context) (lso int64, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	topic := MarksTopic(c.t.DLQ)
	hw, err := c.adm.ListEndOffsets(ctx, topic)
	behind := false // a listing found the last stable offset behind
	for err == nil {
		var ls kadm.ListedOffsets
		if ls, err = c.adm.ListCommittedOffsets(ctx, topic); err != nil {
			if behind && ctx.Err() != nil { // the 10s ran out during the listing
				return lso, errMarksOpenTxn
			}
			break
		}
		stable := true
		hw.Each(func(o kadm.ListedOffset) {
			l, ok := ls.Lookup(topic, o.Partition)
			if !ok || l.Offset < o.Offset {
				stable = false
			}
			if ok {
				lso = l.Offset
			}
		})
		if stable {
			return lso, nil
		}
		behind = true
		select {
		case <-ctx.Done():
			return lso, errMarksOpenTxn
		case <-time.After(20 * time.Millisecond):
		}
	}
	return lso, err
}
