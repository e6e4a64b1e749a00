package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file keeps the group's commits as the assignment's OffsetFetch
// answered them, for the one offset that changes nothing (keepOneOffset).
//
// franz-go reads KIP-447 support off a transaction's TxnOffsetCommit
// response. A transaction that commits no offset, such as the barrier
// written when partitions are assigned (parking.go), holds the session
// for 500ms after End as for a pre-2.5 broker, and the first delivery
// after a join waited for it (issue 10). Such a transaction must commit an
// offset the group already has: the session's own commits, or the
// assignment's fetched ones, where -1 stands for "no commit". Before the
// OffsetFetch answers neither is known, and an offset written then may
// move a commit backwards (the fault suite on Kafka saw orders.parking/4
// go from 5 to -1), so the barrier waits for the answer. The fetch reads
// stable offsets (kgo.RequireStableFetchOffsets, KIP-447): no transaction
// of an earlier owner is pending on them.
//
// The wait is bounded by offsetsFetchWait. A crashed predecessor's open
// transaction with offsets keeps the fetch unanswered (UNSTABLE_OFFSET_
// COMMIT) until it is aborted, and it is aborted at once only when our
// producer's InitProducerID fences it. Run sends that beside the group
// join (loadProducerID), so it is usually done before the assignment;
// when it is not, the barrier's transaction sends it, and without the
// bound the restart would wait for the transaction timeout instead. Past
// the bound the barrier is written without a known offset and pays the
// 500ms.

// offsetsFetchWait bounds the barrier's wait for the assignment's
// OffsetFetch (a few milliseconds when nothing is pending).
const offsetsFetchWait = 100 * time.Millisecond

// offsetsWaitOver ends assignment n's wait for its OffsetFetch, if it is
// still the current one and unanswered: its barrier is written without.
func (c *core) offsetsWaitOver(n int) {
	if n == c.assignments && c.fetched == nil {
		c.fetchWaited, c.barrierDue = true, true
		c.wake()
	}
}

// groupCommits are a group's commits per partition; Offset -1 is no
// commit.
type groupCommits map[string]map[int32]commitPoint

// set sets the commit of partition p of topic.
func (g groupCommits) set(topic string, p int32, cp commitPoint) {
	if g[topic] == nil {
		g[topic] = map[int32]commitPoint{}
	}
	g[topic][p] = cp
}

// offsetsFetched is the group client's kgo.OnOffsetsFetched: it keeps the
// answer's commits and lets a waiting barrier be written.
//
// A commit it cannot read (a topic named only by an ID the metadata request
// did not resolve) is an error, which makes franz-go join the group again
// and fetch again: without its metadata the records it marks done would
// be delivered and moved a second time (progress.go).
func (e *Engine) offsetsFetched(ctx context.Context, cl *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	commits, err := e.readCommits(ctx, cl, resp)
	if err != nil {
		e.log.Warn("reading the group's commits; joining the group again", "err", err)
		return err
	}
	e.mu.Lock()
	defer e.unlock()
	e.core.offsetsFetched(commits)
	return nil
}

// offsetsFetched keeps the assignment's group commits, starts the queues
// of the assigned partitions from them (progress.go) and lets a waiting
// barrier be written.
func (c *core) offsetsFetched(commits groupCommits) {
	c.fetched = commits
	for topic, ps := range commits {
		for p, cp := range ps {
			c.commits.set(topic, p, cp)
			if sh := c.shards[p]; sh != nil && sh.queues[topic] != nil && sh.queues[topic].stage != parkStage {
				c.inherit(sh.queues[topic], cp)
			}
		}
	}
	for _, sh := range c.shards {
		if sh.barrierPending {
			c.barrierDue = true
			c.wake()
			return
		}
	}
}

// readCommits reads the partitions an OffsetFetch answered without error.
// Version 10 names topics by ID only; their names come from a metadata
// request, and a topic it cannot name is an error.
func (e *Engine) readCommits(ctx context.Context, cl *kgo.Client, resp *kmsg.OffsetFetchResponse) (groupCommits, error) {
	commits := groupCommits{}
	add := func(topic string, p int32, offset int64, epoch int32, meta *string, code int16) {
		if topic == "" || kerr.ErrorForCode(code) != nil {
			return
		}
		cp := commitPoint{EpochOffset: kgo.EpochOffset{Epoch: epoch, Offset: offset}}
		if offset < 0 {
			cp.Offset, cp.Epoch = -1, -1
		} else if meta != nil {
			cp.Meta = *meta
		}
		commits.set(topic, p, cp)
	}
	for _, t := range resp.Topics { // v0-v7
		for _, p := range t.Partitions {
			add(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode)
		}
	}
	var names map[[16]byte]string
	for _, g := range resp.Groups { // v8+
		if kerr.ErrorForCode(g.ErrorCode) != nil {
			continue
		}
		for _, t := range g.Topics {
			topic := t.Topic
			if topic == "" {
				if names == nil {
					names = e.topicNames(ctx, cl)
				}
				if topic = names[t.TopicID]; topic == "" {
					return nil, fmt.Errorf("the OffsetFetch answer names a topic by an ID (%x) no metadata request resolved", t.TopicID)
				}
			}
			for _, p := range t.Partitions {
				add(topic, p.Partition, p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode)
			}
		}
	}
	return commits, nil
}

// topicNames maps the IDs of the topics the group consumes to their names;
// empty when the metadata request fails.
func (e *Engine) topicNames(ctx context.Context, cl *kgo.Client) map[[16]byte]string {
	topics := []string{e.plan.Source}
	for _, t := range e.plan.Tiers {
		topics = append(topics, t.Topic)
	}
	if e.parking() {
		topics = append(topics, e.opts.ParkingTopic)
	}
	names := map[[16]byte]string{}
	details, err := kadm.NewClient(cl).ListTopics(ctx, topics...)
	if err != nil {
		return names
	}
	for _, d := range details {
		names[[16]byte(d.ID)] = d.Topic
	}
	return names
}
