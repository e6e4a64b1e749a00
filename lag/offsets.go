package lag

// The broker requests of a scan beside the record fetch (fetch.go): one
// Metadata request for the topics, ListOffsets for their offsets.

import (
	"context"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// topicMeta is what a Metadata response says of one topic: its ID, its
// partitions and their leaders, or its error.
type topicMeta struct {
	id         [16]byte
	partitions []int32 // sorted
	leaders    map[int32]int32
	err        error
}

// metadata asks for topics in one Metadata request that never creates a
// topic (the embedded broker creates topics on request otherwise).
func (m *Monitor) metadata(ctx context.Context, topics []string) (map[string]topicMeta, error) {
	out := make(map[string]topicMeta, len(topics))
	if len(topics) == 0 {
		return out, nil
	}
	c, cancel := m.call(ctx)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.AllowAutoTopicCreation = false
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(c, m.cl)
	if err != nil {
		return nil, err
	}
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		tm := topicMeta{id: t.TopicID, err: kerr.ErrorForCode(t.ErrorCode), leaders: make(map[int32]int32, len(t.Partitions))}
		for _, p := range t.Partitions {
			tm.partitions = append(tm.partitions, p.Partition)
			tm.leaders[p.Partition] = p.Leader
		}
		slices.Sort(tm.partitions)
		out[*t.Topic] = tm
	}
	return out, nil
}

// listOffsets lists one kind of offset (timestamp -2: log start, -1: end)
// at one isolation level (0: high watermark, 1: last stable offset) for
// parts, in one request per partition leader.
func (m *Monitor) listOffsets(ctx context.Context, parts map[string][]int32, timestamp int64, isolation int8) (offsetMap, error) {
	out := offsetMap{}
	if len(parts) == 0 {
		return out, nil
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	req.IsolationLevel = isolation
	for t, ps := range parts {
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = t
		for _, p := range ps {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition = p
			rp.Timestamp = timestamp
			rp.CurrentLeaderEpoch = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	c, cancel := m.call(ctx)
	defer cancel()
	set := func(t string, p int32, l listed) {
		if out[t] == nil {
			out[t] = map[int32]listed{}
		}
		out[t][p] = l
	}
	var errs []error
	for _, sh := range m.cl.RequestSharded(c, req) {
		if sh.Err != nil {
			for _, t := range sh.Req.(*kmsg.ListOffsetsRequest).Topics {
				for _, p := range t.Partitions {
					set(t.Topic, p.Partition, listed{offset: -1, err: sh.Err})
				}
			}
			if !slices.ContainsFunc(errs, func(e error) bool { return e.Error() == sh.Err.Error() }) {
				errs = append(errs, sh.Err)
			}
			continue
		}
		for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				set(t.Topic, p.Partition, listed{offset: p.Offset, err: kerr.ErrorForCode(p.ErrorCode)})
			}
		}
	}
	return out, errors.Join(errs...)
}
