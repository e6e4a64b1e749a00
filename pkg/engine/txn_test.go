package engine

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func offsetsOf(req *kmsg.TxnOffsetCommitRequest) map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			if out[t.Topic] == nil {
				out[t.Topic] = map[int32]int64{}
			}
			out[t.Topic][p.Partition] = p.Offset
		}
	}
	return out
}

// TestOffsetsHook: the TxnOffsetCommit carries the engine's offsets, keeps
// the committed offset of a partition the engine does not know, and never
// goes out empty (franz-go would then hold the session for 500ms).
func TestOffsetsHook(t *testing.T) {
	eo := func(o int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: 0, Offset: o} }
	barrier := &shard{p: 2}
	for _, tt := range []struct {
		name        string
		session     map[string]map[int32]int64 // what the session lists
		offsets     map[string]map[int32]kgo.EpochOffset
		committed   map[string]map[int32]kgo.EpochOffset
		fetched     groupCommits
		barriers    []*shard
		want        map[string]map[int32]int64
		wantUnknown int
	}{
		{
			name:    "engine offsets replace fetched positions",
			session: map[string]map[int32]int64{"orders": {0: 90}},
			offsets: map[string]map[int32]kgo.EpochOffset{"orders": {0: eo(40)}, "orders.retry.1m": {0: eo(3)}},
			want:    map[string]map[int32]int64{"orders": {0: 40}, "orders.retry.1m": {0: 3}},
		},
		{
			name:        "unknown partition keeps its commit",
			session:     map[string]map[int32]int64{"orders": {1: 90}},
			committed:   map[string]map[int32]kgo.EpochOffset{"orders": {1: eo(12)}},
			want:        map[string]map[int32]int64{"orders": {1: 12}},
			wantUnknown: 1,
		},
		{
			name:      "unchanged offsets are left out but one is kept",
			offsets:   map[string]map[int32]kgo.EpochOffset{"orders": {0: eo(5)}},
			committed: map[string]map[int32]kgo.EpochOffset{"orders": {0: eo(5)}},
			want:      map[string]map[int32]int64{"orders": {0: 5}},
		},
		{
			name:     "a barrier before the assignment's offsets are fetched: none, never -1 over a commit the client has not read",
			barriers: []*shard{barrier},
			want:     map[string]map[int32]int64{},
		},
		{
			name:     "a new group's barrier: the fetched no-commit (-1) of a partition",
			barriers: []*shard{barrier},
			fetched:  groupCommits{"orders.parking": {2: eo(-1)}},
			want:     map[string]map[int32]int64{"orders.parking": {2: -1}},
		},
		{
			name:     "a restarted group's barrier: a fetched commit as the group has it",
			barriers: []*shard{barrier},
			fetched:  groupCommits{"orders.parking": {4: eo(5)}},
			want:     map[string]map[int32]int64{"orders.parking": {4: 5}},
		},
		{
			name:      "the session's own commit before the fetched one",
			barriers:  []*shard{barrier},
			committed: map[string]map[int32]kgo.EpochOffset{"orders": {0: eo(7)}},
			fetched:   groupCommits{"orders": {0: eo(3)}},
			want:      map[string]map[int32]int64{"orders": {0: 7}},
		},
		{
			name: "nothing to say",
			want: map[string]map[int32]int64{},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := kmsg.NewPtrTxnOffsetCommitRequest()
			for topic, ps := range tt.session {
				for p, o := range ps {
					addOffset(req, topic, p, eo(o))
				}
			}
			tx := &txn{offsets: tt.offsets, barriers: tt.barriers, fetched: tt.fetched}
			var unknown []string
			if err := offsetsHook(tx, tt.committed, &unknown)(req); err != nil {
				t.Fatal(err)
			}
			got := offsetsOf(req)
			if len(got) != len(tt.want) {
				t.Fatalf("offsets %v, want %v", got, tt.want)
			}
			for topic, ps := range tt.want {
				for p, o := range ps {
					if g, ok := got[topic][p]; !ok || g != o || len(got[topic]) != len(ps) {
						t.Errorf("offsets %v, want %v", got, tt.want)
					}
				}
			}
			if len(unknown) != tt.wantUnknown {
				t.Errorf("unknown %v, want %d", unknown, tt.wantUnknown)
			}
		})
	}
}
