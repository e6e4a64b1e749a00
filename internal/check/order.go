package check

import (
	"slices"
	"sync"
)

// Order checks DESIGN.md invariant 3 from the application's side: per key,
// records are acknowledged in source order. Records of a key that were
// dead-lettered leave gaps, which are allowed; a repeated acknowledgement
// (delivery is at least once) is ignored, only the first one counts. It is
// safe for concurrent use.
type Order struct {
	mu       sync.Mutex
	seq      map[string]int    // id → position in its key's source order
	key      map[string]string // id → key
	last     map[string]int    // key → position of the latest first-acknowledged record
	acked    map[string]bool   // ids acknowledged at least once
	bad      int               // violations
	examples []string          // up to 10 descriptions
	next     map[string]int    // key → next position to hand out
	violated []string          // keys with a violation, in the order found
}

// NewOrder returns an empty Order.
func NewOrder() *Order {
	return &Order{seq: map[string]int{}, key: map[string]string{}, last: map[string]int{}, acked: map[string]bool{}, next: map[string]int{}}
}

// Produced notes record id of key, in the order the records of that key
// were written to their partition. Null keys need no order: skip them.
func (o *Order) Produced(key, id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq[id] = o.next[key]
	o.key[id] = key
	o.next[key]++
	if _, ok := o.last[key]; !ok {
		o.last[key] = -1
	}
}

// Acked notes that the application acknowledged id. Ids not noted by
// Produced (null keys) are ignored.
func (o *Order) Acked(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	k, ok := o.key[id]
	if !ok || o.acked[id] {
		return
	}
	o.acked[id] = true
	if s := o.seq[id]; s < o.last[k] {
		o.bad++
		if !slices.Contains(o.violated, k) {
			o.violated = append(o.violated, k)
		}
		if len(o.examples) < 10 {
			o.examples = append(o.examples, "key "+k+": "+id+" acknowledged after a later record")
		}
	} else {
		o.last[k] = s
	}
}

// Violations returns the number of records acknowledged after a later
// record of their key, with up to 10 examples.
func (o *Order) Violations() (int, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bad, append([]string(nil), o.examples...)
}

// ViolatedKeys returns the keys that had a violation, in the order found.
func (o *Order) ViolatedKeys() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.violated)
}
