package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/kretry/kretry/dlq"
)

// BenchmarkRedriveRate redrives 40 records at --rate 20 and at no limit,
// on the real clock, and reports the rate reached (records/s): the first
// within ±20 % of 20, the second what one redrive moves at most.
//
//	KRETRY_TEST_BROKER=embedded go test -run '^$' -bench RedriveRate -benchtime 1x ./dlq/
func BenchmarkRedriveRate(b *testing.B) {
	for _, rate := range []float64{20, -1} {
		name := "rate-20"
		if rate < 0 {
			name = "unlimited"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				e := newEnv(b, 2, time.Hour)
				c := e.client()
				const n = 40
				deadLetter(b, e, c, n)
				var first, last time.Time
				b.StartTimer()
				res, err := c.Move(context.Background(), dlq.Request{Action: dlq.ActionRedrive, Rate: rate, Progress: func(p dlq.Progress) {
					if first.IsZero() {
						first = time.Now().Add(-p.Elapsed)
					}
					last = time.Now()
				}})
				b.StopTimer()
				if err != nil || res.Moved != n {
					b.Fatalf("moved %+v, %v", res, err)
				}
				b.ReportMetric(float64(n-1)/last.Sub(first).Seconds(), "records/s")
			}
		})
	}
}
