package dlq_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/dlq"
)

// TestTinyRateIsRefused: a positive rate below dlq.MinRate (1e-300, or
// 0.009 records/s) would hold the lease for ever after its first move; it
// is refused before the lease is taken, naming the rate and the floor, and
// nothing moves. NaN is refused too. The admin API refuses the same rates
// with 400, naming the field.
func TestTinyRateIsRefused(t *testing.T) {
	e, srv := apiEnv(t)
	c := e.client()
	ends := func() map[string]int64 { return endOffsets(t, e, e.plan.Tiers[0].Topic, e.plan.DLQ) }
	before := ends()
	for _, r := range []float64{1e-300, 0.009, math.NaN()} {
		for _, action := range []string{dlq.ActionRedrive, dlq.ActionDiscard} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := c.Move(ctx, dlq.Request{Action: action, Reason: "tiny rate", Rate: r})
			cancel()
			if err == nil || !strings.Contains(err.Error(), "rate") || !strings.Contains(err.Error(), "0.01") {
				t.Errorf("%s at rate %g: %+v, %v; want an error naming the rate and the floor 0.01 records/s", action, r, res, err)
			}
			if !errors.Is(err, dlq.ErrBadRequest) {
				t.Errorf("%s at rate %g: %v, want a bad request", action, r, err)
			}
		}
	}
	for _, action := range []string{"redrive", "discard"} {
		for _, body := range []string{`{"reason":"x","rate":1e-300}`, `{"reason":"x","rate":0.009,"dry_run":true}`} {
			code, b := rawCall(t, srv, "POST", "/api/topics/"+e.plan.Source+"/"+action, testToken, strings.NewReader(body))
			if code != 400 || !strings.Contains(b, "rate") || !strings.Contains(b, "0.01") {
				t.Errorf("%s with %s: %d %s, want 400 naming rate and the floor 0.01", action, body, code, b)
			}
		}
	}
	if after := ends(); !mapsEqual(before, after) {
		t.Fatalf("refused tiny rates wrote: end offsets %v, then %v", before, after)
	}
	if st := dlq.StatsOf(mustRead(t, c).Entries); st.Waiting != 5 {
		t.Fatalf("stats %+v after refused requests, want 5 waiting", st)
	}
}
