package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/retrytopics"
)

func TestHugeErrorTextIsTruncatedToFitTheDLQ(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	const maxBytes = 4096
	limit := strconv.Itoa(maxBytes)
	if _, err := e.adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"max.message.bytes": &limit}, e.plan.DLQ); err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("é", 4<<20) // 8 MiB of two-byte runes
	e.app.setAnswer(func(*delivery.Message) error { return delivery.Permanent(errors.New(huge)) })
	e.produce(rec("k", strings.Repeat("v", 1000)))
	eng, _ := e.start(e.options(e.app))
	eventually(t, "dead-lettered", func() bool { return eng.Stats().Permanent.Load() == 1 })
	dlq := e.readAll(e.plan.DLQ)
	if len(dlq) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(dlq))
	}
	msg, _ := header(dlq[0], retrytopics.HeaderErrorMessage)
	if !strings.HasSuffix(msg, "…[truncated]") || !strings.HasPrefix(msg, "éé") || len(msg) < 1000 {
		t.Errorf("error message of %d bytes is not a truncated prefix: %.40q…", len(msg), msg)
	}
	if size := retrytopics.RecordSize(dlq[0]); size > maxBytes {
		t.Errorf("DLQ record is %d bytes, over max.message.bytes %d", size, maxBytes)
	}
}

func TestDeadLetteredLastRecordIsNotDeadLetteredAgainAfterRestart(t *testing.T) {
	e := newEnv(t, 1)
	e.app.setAnswer(func(*delivery.Message) error { return &delivery.StatusError{Status: 400} })
	e.produce(rec("k", "v"))
	eng, stop := e.start(e.options(e.app))
	eventually(t, "dead-lettered", func() bool { return eng.Stats().Permanent.Load() == 1 })
	stop()
	eng2, _ := e.start(e.options(e.app))
	e.produce(rec("k2", "v2")) // a second record proves the restarted engine consumes
	eventually(t, "second dead-lettered", func() bool { return eng2.Stats().Permanent.Load() == 1 })
	if n := len(e.app.callsFor(id(e.plan.Source, 0, 0))); n != 1 {
		t.Errorf("the first record was delivered %d times, want 1", n)
	}
	if n := len(e.readAll(e.plan.DLQ)); n != 2 {
		t.Errorf("DLQ holds %d, want 2", n)
	}
}

func TestNoTiersSendsTransientStraightToDLQAsExhausted(t *testing.T) {
	e := newEnv(t, 1)
	e.app.setAnswer(func(*delivery.Message) error { return context.DeadlineExceeded })
	e.produce(rec("k", "v"))
	eng, _ := e.start(e.options(e.app))
	eventually(t, "exhausted", func() bool { return eng.Stats().Exhausted.Load() == 1 })
	d := e.readAll(e.plan.DLQ)
	if len(d) != 1 {
		t.Fatalf("DLQ holds %d, want 1", len(d))
	}
	if c, _ := header(d[0], retrytopics.HeaderErrorClass); c != "exhausted" {
		t.Errorf("class %q", c)
	}
	if s, _ := header(d[0], retrytopics.HeaderErrorStatus); s != "" {
		t.Errorf("status %q, want empty for a timeout", s)
	}
}
