package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/engine"
)

// TestSlowAppDuringRedrive: the app answers redriven records after 3s
// (ignoring its context). With app.timeout 1s each times out on its first
// delivery and on each of the two tiers, so it is delivered exactly 3
// times (attempts 1, 2, 3) and returns to the DLQ once, exhausted, with
// its redrive count; with app.timeout 10s each is delivered once and
// acknowledged. Stats count what is waiting at each step: none right after
// the redrive, the returned ones after.
func TestSlowAppDuringRedrive(t *testing.T) {
	const n = 6
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		returns bool // back in the DLQ
	}{
		{"past-timeout", time.Second, true},
		{"within-timeout", 10 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2, 50*time.Millisecond, 100*time.Millisecond)
			c := e.client()
			snap := deadLetterWith(t, e, c, n, func() {
				e.runOpts(nil, func(o *engine.Options) { o.DeliveryTimeout = tc.timeout })
			})
			e.app.mu.Lock()
			e.app.delay = func(m *delivery.Message) time.Duration {
				if m.Redrives > 0 {
					return 3 * time.Second
				}
				return 0
			}
			e.app.mu.Unlock()
			res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: -1})
			if err != nil || res.Moved != n {
				t.Fatalf("redrive: %+v, %v; want %d moved", res, err, n)
			}
			if st := dlq.StatsOf(mustRead(t, c).Entries); st.Waiting != 0 || st.Redriven != n {
				t.Errorf("stats right after the redrive: %+v, want 0 waiting, %d redriven", st, n)
			}
			want := 1
			if tc.returns {
				want = 3 // the first delivery and one per tier
				e.waitDLQ(c, 2*n)
			}
			eventually(t, "every slow delivery answered", func() bool { return len(e.app.redriven()) >= want*n })
			attempts := map[string][]int{}
			for _, m := range e.app.redriven() {
				attempts[m.ID] = append(attempts[m.ID], m.Attempt)
			}
			for _, en := range snap.Entries {
				if got := attempts[en.ID]; len(got) != want {
					t.Errorf("%s delivered with attempts %v, want %d deliveries", en.ID, got, want)
				}
			}
			after := mustRead(t, c)
			st := dlq.StatsOf(after.Entries)
			t.Logf("stats after: %+v", st)
			if !tc.returns {
				if st.Waiting != 0 || st.Total != n {
					t.Errorf("stats %+v, want %d records, none waiting", st, n)
				}
				return
			}
			if st.Waiting != n || st.Redriven != n || st.ByClass["exhausted"] != n {
				t.Errorf("stats %+v, want %d waiting (exhausted), %d redriven", st, n, n)
			}
			back := map[string]int{}
			for _, en := range after.Entries[:] {
				if en.State == dlq.Waiting {
					if en.Redrives != 1 || en.RedriveID != res.Op {
						t.Errorf("%s back in the DLQ with redrive count %d (%s), want 1 (%s)", en.ID, en.Redrives, en.RedriveID, res.Op)
					}
					back[en.ID]++
				}
			}
			for _, en := range snap.Entries {
				if back[en.ID] != 1 {
					t.Errorf("%s back in the DLQ %d times, want once", en.ID, back[en.ID])
				}
			}
		})
	}
}
