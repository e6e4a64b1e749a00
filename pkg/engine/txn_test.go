package engine

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOffsetsHook: the TxnOffsetCommit carries the engine's commit points,
// metadata included, keeps the committed offset of a partition the engine
// does not know, and never goes out empty (franz-go would then hold the
// session for 500ms).
func TestOffsetsHook(t *testing.T) {
	eo := func(o int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: 0, Offset: o} }
	cp := func(o int64, meta string) commitPoint { return commitPoint{EpochOffset: eo(o), Meta: meta} }
	barrier := &shard{p: 2}
	type want struct {
		offset int64
		meta   string
	}
	for _, tt := range []struct {
		name        string
		session     map[string]map[int32]int64 // what the session lists
		offsets     groupCommits
		committed   map[string]map[int32]kgo.EpochOffset
		fetched     groupCommits
		barriers    []*shard
		want        map[string]map[int32]want
		wantUnknown int
	}{
		{
			name:    "engine commit points replace fetched positions and the member id",
			session: map[string]map[int32]int64{"orders": {0: 90}},
			offsets: groupCommits{"orders": {0: cp(40, "k1:map")}, "orders.retry.1m": {0: cp(3, "")}},
			want:    map[string]map[int32]want{"orders": {0: {40, "k1:map"}}, "orders.retry.1m": {0: {3, ""}}},
		},
		{
			name:        "unknown partition keeps its commit",
			session:     map[string]map[int32]int64{"orders": {1: 90}},
			committed:   map[string]map[int32]kgo.EpochOffset{"orders": {1: eo(12)}},
			want:        map[string]map[int32]want{"orders": {1: {12, "member"}}},
			wantUnknown: 1,
		},
		{
			name:      "an unchanged offset is written again, its metadata with it",
			offsets:   groupCommits{"orders": {0: cp(5, "k1:map")}},
			committed: map[string]map[int32]kgo.EpochOffset{"orders": {0: eo(5)}},
			want:      map[string]map[int32]want{"orders": {0: {5, "k1:map"}}},
		},
		{
			name:     "a barrier before the assignment's offsets are fetched: none, never -1 over a commit the client has not read",
			barriers: []*shard{barrier},
			want:     map[string]map[int32]want{},
		},
		{
			name:     "a new group's barrier: the fetched no-commit (-1) of a partition",
			barriers: []*shard{barrier},
			fetched:  groupCommits{"orders.parking": {2: cp(-1, "")}},
			want:     map[string]map[int32]want{"orders.parking": {2: {-1, ""}}},
		},
		{
			name:     "a restarted group's barrier: a fetched commit as the group has it",
			barriers: []*shard{barrier},
			fetched:  groupCommits{"orders.parking": {4: cp(5, "")}},
			want:     map[string]map[int32]want{"orders.parking": {4: {5, ""}}},
		},
		{
			name: "nothing to say",
			want: map[string]map[int32]want{},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := kmsg.NewPtrTxnOffsetCommitRequest()
			for topic, ps := range tt.session {
				for p, o := range ps {
					addOffset(req, topic, p, cp(o, "member")) // franz-go's metadata is the member id
				}
			}
			tx := &txn{offsets: tt.offsets, barriers: tt.barriers, fetched: tt.fetched}
			var unknown []string
			if err := offsetsHook(tx, tt.committed, &unknown)(req); err != nil {
				t.Fatal(err)
			}
			got := map[string]map[int32]want{}
			for _, rt := range req.Topics {
				for _, p := range rt.Partitions {
					if got[rt.Topic] == nil {
						got[rt.Topic] = map[int32]want{}
					}
					got[rt.Topic][p.Partition] = want{p.Offset, *p.Metadata}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("commits %v, want %v", got, tt.want)
			}
			if len(unknown) != tt.wantUnknown {
				t.Errorf("unknown %v, want %d", unknown, tt.wantUnknown)
			}
		})
	}
}
