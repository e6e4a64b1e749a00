package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
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
	if err != nil {
		e.log.Warn("leaving the group as static member failed; its partitions move to the other instances after the session timeout",
			"instance_id", e.opts.InstanceID, "err", err)
	}
}
