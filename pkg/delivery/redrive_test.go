package delivery

import (
	"reflect"
	"testing"
	"time"
)

// TestHTTPDeliverRedriveHeaders: a redriven record carries
// kretry-redrive-count and kretry-redrive-id, and MessageFromRequest reads
// them back; a record never redriven has neither.
func TestHTTPDeliverRedriveHeaders(t *testing.T) {
	want := &Message{ID: "orders/1/9", Topic: "orders", Partition: 1, Offset: 9, Timestamp: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Value: []byte("v"), Attempt: 1, Redrives: 2, RedriveID: "rd-20261201T183012Z-3f9a01c2"}
	got := capture(t, HTTPConfig{}, want)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if c, id := got.header.Get(HeaderRedriveCount), got.header.Get(HeaderRedriveID); c != "2" || id != want.RedriveID {
		t.Fatalf("headers %s=%q %s=%q", HeaderRedriveCount, c, HeaderRedriveID, id)
	}
	if !reflect.DeepEqual(got.msg, want) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got.msg, want)
	}
	plain := capture(t, HTTPConfig{}, &Message{ID: "orders/1/9", Topic: "orders", Offset: 9, Value: []byte("v"), Attempt: 1})
	if _, ok := plain.header[HeaderRedriveCount]; ok {
		t.Fatalf("a record never redriven has %s", HeaderRedriveCount)
	}
}
