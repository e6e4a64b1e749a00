package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ErrFenced is wrapped by the error Run returns when another live process
// took over this engine's identity: its transactional id (a newer producer
// with the same id fenced ours) or its group instance id (KIP-345: a newer
// member with the same group.instance.id replaced ours). Nothing this
// engine had in flight is lost: its transaction aborts and the records are
// delivered again by the partitions' owner.
var ErrFenced = errors.New("fenced by another instance with the same identity")

// FencedError says which identity was taken over. Error names the ids, the
// group and what to change.
type FencedError struct {
	InstanceID      string // "" with dynamic membership
	TransactionalID string
	Group           string
	Err             error // what the broker answered
}

func (e *FencedError) Error() string {
	who := fmt.Sprintf("transactional id %q", e.TransactionalID)
	if e.InstanceID != "" {
		who = fmt.Sprintf("instance id %q (transactional id %q)", e.InstanceID, e.TransactionalID)
	}
	return fmt.Sprintf("another live instance of group %q uses %s and took over (%v): give every instance its own kafka.instance_id (env KRETRY_KAFKA__INSTANCE_ID); this instance stops, and the other delivers what it had in flight",
		e.Group, who, e.Err)
}

func (e *FencedError) Unwrap() []error { return []error{ErrFenced, e.Err} }

// isFenced reports whether err means our producer or our static member was
// replaced by a newer one with the same id.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.FencedInstanceID)
}

// errSessionReset is wrapped by commit's error when the transactional
// producer can no longer be used but nothing says another instance took
// over: Run then rebuilds the session (resetSession).
var errSessionReset = errors.New("transactional session must be rebuilt")

// fencedOrReset tells a takeover by another live instance (FencedError)
// from a producer fenced by its own transaction coordinator: Kafka bumps
// the producer epoch when it aborts a transaction that outlived
// transaction.timeout.ms — seen in the fault suite when the coordinator's
// broker was killed mid-transaction — and the producer then meets
// PRODUCER_FENCED although no other instance exists. A takeover shows in
// the group: another member holds our instance id — unless that member is
// our own orphan (see pardonTakeover).
func (e *Engine) fencedOrReset(err error) error {
	if errors.Is(err, kerr.FencedInstanceID) || e.instanceTaken(context.Background()) {
		if e.pardonTakeover(err, time.Now()) {
			return fmt.Errorf("%w: %w: %w", errSessionReset, errPardoned, err)
		}
		return e.fenced(err)
	}
	return fmt.Errorf("%w: %w", errSessionReset, err)
}

// instanceTaken reports whether the group lists another member under our
// instance id. Without an instance id, when the group cannot be read, or
// while our client has no member id (franz-go clears it to rejoin after
// UNKNOWN_MEMBER_ID, as when a broker outage outlasted our session: the
// group may list our own new member before the join's answer tells us its
// id), it reports false.
func (e *Engine) instanceTaken(ctx context.Context) bool {
	if e.opts.InstanceID == "" {
		return false
	}
	ours, _ := e.sess.Client().GroupMetadata()
	if ours == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := e.adm.DescribeGroups(ctx, e.opts.Group)
	if err != nil {
		return false
	}
	for _, m := range gs[e.opts.Group].Members {
		if m.InstanceID != nil && *m.InstanceID == e.opts.InstanceID && m.MemberID != ours {
			return true
		}
	}
	return false
}

// takeoverWindow is how long resetSession looks for a takeover in the
// group before it rebuilds the session, when the client had no broker
// trouble in the last troubleWindow. A duplicate loads its producer ID
// beside its group join (loadProducerID), so its producer can fence ours
// before its member shows in the group: asked at once, the group showed
// only us, the session was rebuilt, and our rejoin fenced the newer
// instance instead (e2e's TestDuplicateOfATwoTopicProcess). So a reset
// with an instance id and no broker trouble takes at least this long.
const takeoverWindow = 3 * time.Second

// takenWithin asks the group whether another member holds our instance id
// (instanceTaken) every 100ms, for at most d or until ctx ends; false at
// once without an instance id.
func (e *Engine) takenWithin(ctx context.Context, d time.Duration) bool {
	if e.opts.InstanceID == "" {
		return false
	}
	deadline := time.Now().Add(d)
	for {
		if e.instanceTaken(ctx) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// resetSession replaces the group transact session after errSessionReset:
// the old one closes (a static member does not leave, so the new one takes
// its partitions back at once), every partition's state is dropped, and the
// records after the last commit are delivered again.
//
// Whether another process took our identity over is asked of the group
// (takenWithin), with static membership. Without it the group cannot
// tell, and two resets within a minute end Run: a producer that keeps being
// fenced has a twin (the same transactional id). With it, repeated resets
// mean a broker outage that outlasts a session (a coordinator down for
// longer than the transaction timeout, moving twice in a rolling restart):
// they go on, each a little later than the one before (nextResetPause, up to maxResetPause), ctx
// permitting.
func (e *Engine) resetSession(ctx context.Context, cause error) error {
	// A producer that cannot go on may have been fenced by a duplicate
	// whose member joined after our last End's TxnOffsetCommit: the End
	// then fails without saying "fenced" (an epoch bumped under it) and
	// only the group tells. Rejoining under our instance id would fence
	// the newer instance instead of us.
	//
	// The state is dropped first: no delivery starts while the group is
	// asked, and nothing is left to commit if Run stops meanwhile.
	e.mu.Lock()
	e.reset()
	e.unlock()
	window := takeoverWindow
	if ago, ok := e.trouble.since(time.Now()); ok && ago <= troubleWindow {
		window = 0 // an outage: pardonTakeover takes a takeover then for our own orphan anyway
	}
	taken := !errors.Is(cause, errPardoned) && e.takenWithin(ctx, window)
	if ctx.Err() != nil {
		return nil // stopping: no rejoin under our instance id, which a duplicate may hold now
	}
	if taken && !e.pardonTakeover(cause, time.Now()) {
		// Name what the broker answered (the failed End), not the
		// producer's state-machine error at the next Begin.
		why := cause
		if e.lastEndErr != nil {
			why = e.lastEndErr
		}
		return e.fenced(why)
	}
	again := !e.lastReset.IsZero() && time.Since(e.lastReset) < time.Minute
	if again && e.opts.InstanceID == "" {
		return e.fenced(cause)
	}
	pause := e.nextResetPause(again)
	e.log.Warn("the transactional producer cannot go on (its coordinator fenced it, or a transaction failed to end, as in a broker outage); starting a new session, the records after the last commit will be delivered again",
		"err", cause, "after", pause)
	e.lastEndErr = nil
	e.waitDeliveries(e.opts.DeliveryTimeout + time.Second)
	if pause > 0 {
		select {
		case <-time.After(pause):
		case <-ctx.Done(): // a stop cuts the pause short
		}
	}
	e.lastReset = time.Now()
	e.sess.Close()
	e.mu.Lock()
	e.reset()
	e.unlock()
	sess, err := kgo.NewGroupTransactSession(e.copts...)
	if err != nil {
		return fmt.Errorf("engine: rebuilding the group session: %w", err)
	}
	e.sess = sess
	e.cl.Store(sess.Client())
	return nil
}

// nextResetPause is the pause before a session reset: none when the last
// reset is a minute or more ago, else double the last pause, from 1s up to
// maxResetPause.
func (e *Engine) nextResetPause(again bool) time.Duration {
	if !again {
		e.resetPause = 0
		return 0
	}
	e.resetPause = min(max(2*e.resetPause, time.Second), maxResetPause)
	return e.resetPause
}

// maxResetPause bounds the pause before a session reset that follows
// another within a minute (see resetSession).
const maxResetPause = 30 * time.Second

func (e *Engine) fenced(err error) error {
	return &FencedError{InstanceID: e.opts.InstanceID, TransactionalID: e.opts.TransactionalID, Group: e.opts.Group, Err: err}
}

// leaveStatic removes this engine's static member, memberID, from its
// group after a clean stop. A static member (KIP-345) does not leave when
// its client closes — that is what lets a restart under the same id take
// its partitions back at once — so without this a scale-down would hold
// its partitions for the whole session timeout. The request names both the
// instance id and our member id: if another process holds the instance id
// now (a duplicate that fenced us, or a sibling engine of ours was fenced),
// the coordinator refuses it with FENCED_INSTANCE_ID instead of removing
// the other process's member.
func (e *Engine) leaveStatic(memberID string) {
	if e.opts.InstanceID == "" || memberID == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = e.opts.Group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID, m.InstanceID = memberID, &e.opts.InstanceID
	reason := "kretry stopped"
	m.Reason = &reason
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, e.admCl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err == nil {
		for _, m := range resp.Members {
			err = errors.Join(err, kerr.ErrorForCode(m.ErrorCode))
		}
	}
	switch {
	case errors.Is(err, kerr.FencedInstanceID):
		// Another live process took our instance id over before we
		// stopped: its member stays, and so do the partitions it owns.
		e.log.Warn("not leaving the group: another live instance holds this instance id now (give every instance its own kafka.instance_id)",
			"instance_id", e.opts.InstanceID, "err", err)
	case err != nil:
		e.log.Warn("leaving the group as static member failed; its partitions move to the other instances after the session timeout",
			"instance_id", e.opts.InstanceID, "err", err)
	}
}

// ErrAuthFailed is wrapped by the error Run returns when the brokers have
// refused the client's credentials — its SASL authentication or its TLS
// client certificate — for authFailureLimit without a break: they were
// changed on the cluster (a password rotated) or expired (a certificate)
// while the engine ran, and only new ones help.
var ErrAuthFailed = errors.New("the brokers refuse the client's credentials")

// authFailureLimit is how long the brokers may refuse our credentials
// before Run gives up. A refusal can be passing (a broker still loading the
// credentials); refusals for half a minute are not. The refusals end when
// polls go on for authFailureGap without one. franz-go retries a failed
// connection or group join within a few seconds (its backoff grows to 5s,
// plus the join attempt itself, slower on a loaded broker), so a gap that
// long means they stopped. Only polls count: while the loop is held (a
// commit retrying against a coordinator that refuses us), no gap can be
// seen, and the refusals that queued meanwhile continue the same episode.
const (
	authFailureLimit = 30 * time.Second
	authFailureGap   = 20 * time.Second
)

// credentialsRefused reports whether err is the brokers refusing our SASL
// authentication or our TLS client certificate (a TLS alert about it, in
// crypto/tls's words: "unknown certificate" is certificate_unknown, which
// Kafka sends for an expired one).
func credentialsRefused(err error) bool {
	if errors.Is(err, kerr.SaslAuthenticationFailed) {
		return true
	}
	s := err.Error()
	if !strings.Contains(s, "remote error: tls: ") {
		return false
	}
	for _, a := range []string{"bad certificate", "unknown certificate", "expired certificate", "revoked certificate", "unsupported certificate", "certificate required"} {
		if strings.Contains(s, a) {
			return true
		}
	}
	return false
}

// authFailing tracks the fetch errors that are refusals of our credentials
// (err, nil when the last poll had none) and returns a fatal error once
// they have gone on for Options.authLimit with no gap of authFailureGap
// between polls that saw them.
func (e *Engine) authFailing(err error, now time.Time) error {
	if err == nil {
		if !e.authLast.IsZero() && now.Sub(e.authLast) >= authFailureGap {
			e.log.Info("the brokers no longer refuse the client's credentials", "refused_for", e.authLast.Sub(e.authFirst).Round(time.Second))
			e.authFirst, e.authLast = time.Time{}, time.Time{}
		}
		return nil
	}
	if e.authFirst.IsZero() {
		e.authFirst = now
		e.log.Warn("the brokers refuse the client's credentials (a password changed on the cluster? a certificate expired?); giving up if it goes on",
			"after", e.opts.authLimit, "err", err)
	}
	e.authLast = now
	if d := now.Sub(e.authFirst); d >= e.opts.authLimit {
		what := "TLS: the broker refused the client certificate"
		if errors.Is(err, kerr.SaslAuthenticationFailed) {
			what = "SASL authentication failed"
		}
		return fmt.Errorf("engine: %s for %v (%w): %w", what, d.Round(time.Second), ErrAuthFailed, err)
	}
	return nil
}
