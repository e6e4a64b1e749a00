// Package topicread reads partitions of one topic up to end offsets fixed
// before the read: the last stable offset for a read_committed reader
// (kadm's ListCommittedOffsets), the high watermark for read_uncommitted
// (ListEndOffsets). The DLQ tools and `kretry parking release` use it to
// read a topic "as of now" without mistaking a slow fetch for the end.
package topicread

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Range reads topic's partitions from from[p] (inclusive) to ends[p]
// (exclusive) with a reader made from opts (the caller's TLS, SASL and
// seed brokers), calling fn with each data record. committed reads
// read_committed, where ends are last stable offsets; otherwise
// read_uncommitted, to high watermarks. Partitions without a from, or
// with from at or past their end, are not read. Errors are To's, or the
// reader's construction.
func Range(ctx context.Context, opts []kgo.Opt, topic string, committed bool, from, ends map[int32]int64, fn func(*kgo.Record)) error {
	start, left := map[int32]kgo.Offset{}, map[int32]int64{}
	for p, f := range from {
		if end, ok := ends[p]; ok && f < end {
			start[p], left[p] = kgo.NewOffset().At(f), end
		}
	}
	if len(start) == 0 {
		return nil
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	rd, err := kgo.NewClient(append(slices.Clone(opts), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(), kgo.FetchMaxWait(100*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer rd.Close()
	return To(ctx, rd, topic, left, fn)
}

// Stall bounds a read that makes no progress: the records below an end
// offset listed by the broker are there to be fetched, so a read this long
// without any is a broker problem, not an end.
const Stall = 30 * time.Second

// To polls rd until every partition in left (partition → end offset,
// exclusive) has been read to its end, calling fn with each data record
// below its partition's end. rd must consume topic from the offsets to
// read with kgo.KeepControlRecords: an end can be a transaction marker,
// the only record at its offset. left is consumed.
//
// It returns ctx's error, the first fetch error naming its partition, or,
// when no record arrived for Stall, an error naming the partitions left.
func To(ctx context.Context, rd *kgo.Client, topic string, left map[int32]int64, fn func(*kgo.Record)) error {
	last := time.Now()
	for len(left) > 0 {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := rd.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := FetchErr(topic, fs); err != nil {
			return err
		}
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := left[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			n++
			if !r.Attrs.IsControl() {
				fn(r)
			}
			if r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
		if n > 0 {
			last = time.Now()
		} else if time.Since(last) > Stall {
			return fmt.Errorf("reading %s: no record for %s while partitions %v are not read to their end", topic, Stall, left)
		}
	}
	return nil
}

// FetchErr is the first error of fs, a poll of topic, other than the
// poll's own deadline or cancellation, naming the partition.
func FetchErr(topic string, fs kgo.Fetches) error {
	var ferr error
	fs.EachError(func(_ string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
			ferr = fmt.Errorf("reading %s partition %d: %w", topic, p, err)
		}
	})
	return ferr
}
