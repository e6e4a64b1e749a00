package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kretry/kretry/internal/demo"
)

// A demo that gave up waiting says so, with the count not yet settled, and
// does not call them lost; a demo that lost records still says FAILED: lost.
func TestDemoReportTellsGaveUpFromLost(t *testing.T) {
	gaveUp := &demo.Report{Produced: 2000, Delivered: 1900, DeadLettered: 85, TimedOut: true, TimeoutMS: 60000, Unsettled: 15,
		UnsettledIDs: []string{"orders/0/3", "orders/1/7"}}
	var out bytes.Buffer
	printReport(&out, gaveUp)
	for _, want := range []string{
		"lost           0\n",
		"not settled    15  (still retrying, parked or held when the demo stopped waiting)\n",
		"FAILED: the demo gave up waiting after 1m0s with 15 records not yet settled (still retrying or held; not known lost): orders/0/3; orders/1/7; and 13 more\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("gave-up report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "records were lost") {
		t.Errorf("gave-up report says records were lost:\n%s", out.String())
	}

	// Interrupted (SIGINT, SIGTERM) long before the timeout: it says so,
	// not that it waited a minute.
	out.Reset()
	interrupted := *gaveUp
	interrupted.Interrupted, interrupted.DurationMS = true, 2300
	printReport(&out, &interrupted)
	if want := "INTERRUPTED: the demo was interrupted after 2.3s with 15 records not yet settled"; !strings.Contains(out.String(), want) || strings.Contains(out.String(), "gave up") {
		t.Errorf("interrupted report lacks %q or says it gave up:\n%s", want, out.String())
	}

	out.Reset()
	printReport(&out, &demo.Report{Produced: 10, Delivered: 9, Lost: 1, LostIDs: []string{"orders/0/4"}})
	if !strings.Contains(out.String(), "FAILED: records were lost, duplicated in the DLQ or delivered out of order: orders/0/4") || strings.Contains(out.String(), "gave up") {
		t.Errorf("lost report:\n%s", out.String())
	}
}
