package retrytopics

import (
	"container/heap"
	"time"
)

// Timeline orders tier partitions (of type K) by the due time of their
// next record (Schedule.NextDue), so that whoever hands due records to
// delivery finds the partitions due at once, without walking every
// partition: the engine does so at the end of every delivery, not only on
// its loop's turn, so that a retry is not late while the loop waits on a
// transaction. The zero Timeline is empty; it is not safe for concurrent
// use.
type Timeline[K comparable] struct {
	h timelineHeap[K]
}

type timelineEntry[K comparable] struct {
	k   K
	due time.Time
}

type timelineHeap[K comparable] struct {
	items []timelineEntry[K]
	at    map[K]int
}

// Set places k at due, adding it or moving it.
func (t *Timeline[K]) Set(k K, due time.Time) {
	if i, ok := t.h.at[k]; ok {
		t.h.items[i].due = due
		heap.Fix(&t.h, i)
		return
	}
	if t.h.at == nil {
		t.h.at = map[K]int{}
	}
	heap.Push(&t.h, timelineEntry[K]{k, due})
}

// Delete removes k; nothing when it is not on the timeline.
func (t *Timeline[K]) Delete(k K) {
	if i, ok := t.h.at[k]; ok {
		heap.Remove(&t.h, i)
	}
}

// Next is the partition due soonest and its due time; false when the
// timeline is empty.
func (t *Timeline[K]) Next() (K, time.Time, bool) {
	if len(t.h.items) == 0 {
		var zero K
		return zero, time.Time{}, false
	}
	return t.h.items[0].k, t.h.items[0].due, true
}

// Len is the number of partitions on the timeline.
func (t *Timeline[K]) Len() int { return len(t.h.items) }

func (h *timelineHeap[K]) Len() int           { return len(h.items) }
func (h *timelineHeap[K]) Less(i, j int) bool { return h.items[i].due.Before(h.items[j].due) }
func (h *timelineHeap[K]) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.at[h.items[i].k], h.at[h.items[j].k] = i, j
}

func (h *timelineHeap[K]) Push(x any) {
	e := x.(timelineEntry[K])
	h.at[e.k] = len(h.items)
	h.items = append(h.items, e)
}

func (h *timelineHeap[K]) Pop() any {
	n := len(h.items) - 1
	e := h.items[n]
	h.items[n] = timelineEntry[K]{}
	h.items = h.items[:n]
	delete(h.at, e.k)
	return e
}
