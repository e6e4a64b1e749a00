package retrytopics

import (
	"slices"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var s Schedule[int]
	if s.Waiting(t0) || s.TakeDue(t0) != nil {
		t.Fatal("an empty schedule waits or hands out records")
	}
	if _, ok := s.NextDue(); ok {
		t.Fatal("an empty schedule has a next due time")
	}
	s.Add(1, t0.Add(time.Second))
	s.Add(2, t0) // due before record 1, yet read after it: waits behind it
	s.Add(3, t0.Add(2*time.Second))
	if !s.Waiting(t0) {
		t.Error("not waiting while the next record is due in 1s")
	}
	if got := s.TakeDue(t0); got != nil {
		t.Errorf("TakeDue(t0) = %v, want none: record 1 is not due and holds back record 2", got)
	}
	if d, ok := s.NextDue(); !ok || !d.Equal(t0.Add(time.Second)) {
		t.Errorf("NextDue = %v, %v; want t0+1s", d, ok)
	}
	if got := s.TakeDue(t0.Add(time.Second)); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("TakeDue(t0+1s) = %v, want [1 2]", got)
	}
	if s.Len() != 1 || !s.Waiting(t0.Add(time.Second)) {
		t.Errorf("len %d, waiting %v; want 1 record waiting", s.Len(), s.Waiting(t0.Add(time.Second)))
	}
	if got := s.TakeDue(t0.Add(time.Hour)); !slices.Equal(got, []int{3}) || s.Len() != 0 {
		t.Errorf("TakeDue(t0+1h) = %v (len %d), want [3]", got, s.Len())
	}
	s.Add(4, time.Time{}) // zero: due now
	if s.Waiting(t0) || !slices.Equal(s.TakeDue(t0), []int{4}) {
		t.Error("a record with no due time is not due at once")
	}
}
