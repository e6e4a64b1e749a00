package parking_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/parking"
)

func TestOpRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		rec  *kgo.Record
		want parking.Op
	}{
		{"block", parking.OpRecord("t.parking", 2, []byte("K"), parking.OpBlock, "t/2/7"), parking.Op{Kind: "block", Ref: "t/2/7"}},
		{"unblock without ref", parking.OpRecord("t.parking", 0, []byte("K"), parking.OpUnblock, ""), parking.Op{Kind: "unblock"}},
		{"operator release", parking.OperatorRelease("t.parking", 1, []byte("K")), parking.Op{Kind: "release", Ref: "release", Origin: "operator"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parking.ParseOp(tc.rec)
			if !ok || got != tc.want {
				t.Errorf("ParseOp = %+v, %v; want %+v", got, ok, tc.want)
			}
			if tc.rec.Value != nil {
				t.Errorf("an op record has a value: %q", tc.rec.Value)
			}
		})
	}
	if _, ok := parking.ParseOp(&kgo.Record{Headers: []kgo.RecordHeader{{Key: "kretry-attempt"}, {Key: parking.HeaderOp}}}); ok {
		t.Error("a record whose first header is not the op header parsed as an op")
	}
	if _, ok := parking.ParseOp(&kgo.Record{}); ok {
		t.Error("a record without headers parsed as an op")
	}
}

func TestReleaseRef(t *testing.T) {
	ref := parking.ReleaseRef(parking.VerdictOK, "orders/0/5")
	if v, id := parking.SplitRef(ref); v != "ok" || id != "orders/0/5" {
		t.Errorf("SplitRef(%q) = %q, %q", ref, v, id)
	}
	if v, id := parking.SplitRef("dead_letter orders/1/2"); v != "dead_letter" || id != "orders/1/2" {
		t.Errorf("got %q %q", v, id)
	}
	if v, id := parking.SplitRef("ok"); v != "ok" || id != "" {
		t.Errorf("got %q %q", v, id)
	}
}
