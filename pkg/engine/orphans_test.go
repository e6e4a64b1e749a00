package engine

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/retrytopics"
)

// A record left in a tier that the tier list no longer names is reported
// at start (retrytopics.Orphans): nothing would consume it.
func TestOrphanedTierIsReported(t *testing.T) {
	e := newEnv(t, 1, 100*time.Millisecond)
	old := retrytopics.TierTopic(e.plan.Source, 30*time.Second)
	if _, err := e.adm.CreateTopic(context.Background(), 1, 1, nil, old); err != nil {
		t.Fatal(err)
	}
	if err := kafkatest.WaitTopics(context.Background(), e.adm, old); err != nil {
		t.Fatal(err)
	}
	e.produce(&kgo.Record{Topic: old, Value: []byte("waiting")})
	opts := []kgo.Opt{kgo.SeedBrokers(e.addrs...)}
	orphans, err := retrytopics.Orphans(context.Background(), e.adm, opts, &e.plan, e.group())
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) != 1 || orphans[0].Topic != old || orphans[0].Records != 1 {
		t.Fatalf("orphans %+v, want %s with 1 record", orphans, old)
	}
	// A tier in the plan, the DLQ and a drained old tier are not orphans.
	var offs kadm.Offsets
	offs.AddOffset(old, 0, 1, -1)
	if err := e.adm.CommitAllOffsets(context.Background(), e.group(), offs); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{e.plan.Tiers[0].Topic, e.plan.DLQ} {
		if _, err := e.adm.CreateTopic(context.Background(), 1, 1, nil, tp); err != nil {
			t.Fatal(err)
		}
	}
	if err := kafkatest.WaitTopics(context.Background(), e.adm, e.plan.Tiers[0].Topic, e.plan.DLQ); err != nil {
		t.Fatal(err)
	}
	e.produce(&kgo.Record{Topic: e.plan.Tiers[0].Topic, Value: []byte("x")}, &kgo.Record{Topic: e.plan.DLQ, Value: []byte("y")})
	if orphans, err := retrytopics.Orphans(context.Background(), e.adm, opts, &e.plan, e.group()); err != nil || len(orphans) != 0 {
		t.Fatalf("after the old tier drained: orphans %+v, %v; want none", orphans, err)
	}
	// The engine writes tiers in transactions and commits past the last
	// record it took, at the commit marker: a marker is not a record (a
	// newcomer saw "records=1" for a tier kretry lag showed drained).
	older := retrytopics.TierTopic(e.plan.Source, time.Hour)
	if _, err := e.adm.CreateTopic(context.Background(), 1, 1, nil, older); err != nil {
		t.Fatal(err)
	}
	if err := kafkatest.WaitTopics(context.Background(), e.adm, older); err != nil {
		t.Fatal(err)
	}
	txc, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.TransactionalID(older+"-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer txc.Close()
	if err := txc.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := txc.ProduceSync(context.Background(), &kgo.Record{Topic: older, Value: []byte("done")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txc.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	var past kadm.Offsets
	past.AddOffset(older, 0, 1, -1) // past the record, at its commit marker
	if err := e.adm.CommitAllOffsets(context.Background(), e.group(), past); err != nil {
		t.Fatal(err)
	}
	if orphans, err := retrytopics.Orphans(context.Background(), e.adm, opts, &e.plan, e.group()); err != nil || len(orphans) != 0 {
		t.Fatalf("a drained transactional tier (only its commit marker past the commit): orphans %+v, %v; want none", orphans, err)
	}
}
