package engine

import (
	"testing"

	"github.com/kretry/kretry/pkg/flow"
)

// TestReleaseArg: the hold line's hint names a held key the way `kretry
// parking release` takes it back: --key for a plain key, --key-hex for
// one a shell or a terminal would mangle (and the empty one), --partition
// with ordering partition.
func TestReleaseArg(t *testing.T) {
	for _, tc := range []struct {
		o    flow.Ordering
		key  string
		want string
	}{
		{flow.OrderingKey, "customer-42", "--key customer-42"},
		{flow.OrderingKey, "a b", "--key-hex 612062"},
		{flow.OrderingKey, "K\xff\x01", "--key-hex 4bff01"},
		{flow.OrderingKey, "", "--key-hex "},
		{flow.OrderingPartition, "", "--partition 3"},
	} {
		if got := releaseArg(tc.o, 3, []byte(tc.key)); got != tc.want {
			t.Errorf("releaseArg(%s, %q) = %q, want %q", tc.o, tc.key, got, tc.want)
		}
	}
}
