package e2e

// TestBurrowSideBySide runs Burrow (LinkedIn's lag monitor, the Debian
// package's 1.2.1) and kretry's lag monitor against the same broker and
// consumer groups and compares their answers, scenario by scenario
// (docs/METRICS.md, "kretry and Burrow"). It needs Burrow on PATH and
// skips without it.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/kafkatest"
	"github.com/kretry/kretry/internal/testlog"
	"github.com/kretry/kretry/lag"
)

// burrowKafkaSkip is why the test does not run on Apache Kafka 4.1.1,
// found by running Burrow against it: the cluster module's offset requests
// get EOF, and the consumer module logs "failed to decode … value version
// 4" for every commit.
const burrowKafkaSkip = "Burrow 1.2.1 cannot monitor Kafka 4.1.1: its sarama sends ListOffsets v0, which Kafka 4 removed " +
	"(KIP-896; the broker closes the connection), and it cannot decode the offset-commit values Kafka 4 writes to " +
	"__consumer_offsets (value version 4; it knows 0, 1 and 3)"

// burrowStatus is what GET /v3/kafka/<cluster>/consumer/<group>/lag
// answers.
type burrowStatus struct {
	Error   bool   `json:"error"`
	Message string `json:"message"`
	Status  struct {
		Status     string `json:"status"`
		TotalLag   int64  `json:"totallag"`
		Partitions []struct {
			Topic      string `json:"topic"`
			Partition  int32  `json:"partition"`
			Status     string `json:"status"`
			CurrentLag int64  `json:"current_lag"`
		} `json:"partitions"`
	} `json:"status"`
}

// commitRecord is an offset commit as Kafka writes it to
// __consumer_offsets (the OffsetCommit key version 1 and value version 3 of
// Kafka's GroupMetadataManager), which is where Burrow 1.2 reads commits.
func commitRecord(group, topic string, partition int32, offset int64, at time.Time) *kgo.Record {
	str := func(b []byte, s string) []byte {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		return append(b, s...)
	}
	key := binary.BigEndian.AppendUint16(nil, 1)
	key = str(key, group)
	key = str(key, topic)
	key = binary.BigEndian.AppendUint32(key, uint32(partition))
	val := binary.BigEndian.AppendUint16(nil, 3)
	val = binary.BigEndian.AppendUint64(val, uint64(offset))
	val = binary.BigEndian.AppendUint32(val, 0xffffffff) // leader epoch: none
	val = str(val, "")                                   // metadata
	val = binary.BigEndian.AppendUint64(val, uint64(at.UnixMilli()))
	return &kgo.Record{Topic: "__consumer_offsets", Partition: 0, Key: key, Value: val}
}

func TestBurrowSideBySide(t *testing.T) {
	burrow, err := exec.LookPath("Burrow")
	if err != nil {
		t.Skip("Burrow not installed (apt-get install burrow; .ci/run installs it): skipping the side-by-side with Burrow")
	}
	if brokerKind == kafkatest.Kafka {
		t.Skip(burrowKafkaSkip)
	}
	t.Parallel()
	zk := startZKFake(t)
	_, addr := startBroker(t)

	// The embedded broker (kfake) keeps group commits in memory and writes
	// nothing to __consumer_offsets, where Burrow 1.2 reads them: every
	// commit of the test is also written there, in Kafka's own format, so
	// that both monitors see the same commits against the same log ends.
	createTopic(t, addr, "__consumer_offsets", 1)
	mirror := newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := kadm.NewClient(newClient(t, addr))
	producer := newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx := context.Background()
	commit := func(group, topic string, offset int64) {
		t.Helper()
		var os kadm.Offsets
		os.AddOffset(topic, 0, offset, -1)
		if err := adm.CommitAllOffsets(ctx, group, os); err != nil {
			t.Fatalf("commit %s %s@%d: %v", group, topic, offset, err)
		}
		if err := mirror.ProduceSync(ctx, commitRecord(group, topic, 0, offset, time.Now())).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	produce := func(topic string, n int) {
		t.Helper()
		rs := make([]*kgo.Record, n)
		for i := range rs {
			rs[i] = &kgo.Record{Topic: topic, Partition: 0, Value: fmt.Appendf(nil, "v%d", i)}
		}
		if err := producer.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	type scenario struct {
		name, group, topic string
		setup              func()
		round              func(i int) // before each scan
		kretryStatus       lag.Status
		kretryLag          int64  // checked when kretryStatus is OK
		burrowStatus       string // of the partition
		burrowLag          int64  // current_lag; -1: the same as kretry's
	}
	var end = map[string]int64{}
	scenarios := []scenario{
		{name: "caught up", group: "g-caught", topic: "t-caught",
			setup: func() { produce("t-caught", 5); end["t-caught"] = 5; commit("g-caught", "t-caught", 5) },
			round: func(int) {
				produce("t-caught", 5)
				end["t-caught"] += 5
				commit("g-caught", "t-caught", end["t-caught"])
			},
			kretryStatus: lag.StatusOK, kretryLag: 0, burrowStatus: "OK", burrowLag: 0},
		{name: "falling behind", group: "g-behind", topic: "t-behind",
			setup: func() { produce("t-behind", 20); commit("g-behind", "t-behind", 5) },
			round: func(i int) {
				produce("t-behind", 20)
				commit("g-behind", "t-behind", int64(5*(i+2)))
			},
			kretryStatus: lag.StatusWarn, burrowStatus: "WARN", burrowLag: -1},
		{name: "stopped consumer", group: "g-stop", topic: "t-stop",
			setup:        func() { produce("t-stop", 20); commit("g-stop", "t-stop", 5) },
			round:        func(int) { produce("t-stop", 5) },
			kretryStatus: lag.StatusStop, burrowStatus: "STOP", burrowLag: -1},
		{name: "idle topic", group: "g-idle", topic: "t-idle",
			setup:        func() { produce("t-idle", 10); commit("g-idle", "t-idle", 10) },
			kretryStatus: lag.StatusOK, kretryLag: 0, burrowStatus: "OK", burrowLag: 0},
		{name: "transactional topic, consumer at its end", group: "g-txn", topic: "t-txn",
			setup: func() {
				cl := newClient(t, addr, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("burrow-side-by-side"))
				if err := cl.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				for i := range 10 {
					if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t-txn", Partition: 0, Value: fmt.Appendf(nil, "t%d", i)}).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
				if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
					t.Fatal(err)
				}
				// A read_committed consumer that read all ten commits 10:
				// the commit marker's offset, one below the high watermark.
				commit("g-txn", "t-txn", 10)
			},
			kretryStatus: lag.StatusOK, kretryLag: 0, burrowStatus: "STOP", burrowLag: 1},
	}
	var groups []lag.Group
	for _, s := range scenarios {
		createTopic(t, addr, s.topic, 1)
		groups = append(groups, lag.Group{Name: s.group})
	}
	for _, s := range scenarios {
		if s.setup != nil {
			s.setup()
		}
	}

	dir := t.TempDir()
	httpAddr := freeAddr(t)
	cfg := fmt.Sprintf(`[general]
pidfile=%q
[logging]
filename=%q
level="info"
[zookeeper]
servers=[%q]
timeout=6
root-path="/burrow"
[client-profile.test]
client-id="burrow"
kafka-version="2.1.0"
[cluster.local]
class-name="kafka"
servers=[%q]
client-profile="test"
topic-refresh=1
offset-refresh=1
[consumer.local]
class-name="kafka"
cluster="local"
servers=[%q]
client-profile="test"
[httpserver.default]
address=%q
[storage.default]
class-name="inmemory"
workers=2
intervals=3
expire-group=604800
min-distance=1
`, filepath.Join(dir, "burrow.pid"), filepath.Join(dir, "burrow.log"), zk.addr(), addr, addr, httpAddr)
	if err := os.WriteFile(filepath.Join(dir, "burrow.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var out testlog.Buffer
	cmd := exec.Command(burrow, "-config-dir", dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "burrow.log"))
			t.Logf("Burrow's output:\n%s\nits log:\n%s", out.String(), log)
		}
	})
	ask := func(group string) (burrowStatus, error) {
		var st burrowStatus
		resp, err := http.Get("http://" + httpAddr + "/v3/kafka/local/consumer/" + group + "/lag")
		if err != nil {
			return st, err
		}
		defer resp.Body.Close()
		err = json.NewDecoder(resp.Body).Decode(&st)
		return st, err
	}
	var last string
	defer func() {
		if t.Failed() {
			t.Logf("Burrow's last answer: %s", last)
		}
	}()
	waitFor(t, 30*time.Second, "Burrow to know every group", func() bool {
		for _, s := range scenarios {
			if st, err := ask(s.group); err != nil || st.Error || len(st.Status.Partitions) == 0 {
				last = fmt.Sprintf("%s: %+v %v", s.group, st, err)
				return false
			}
		}
		return true
	})

	// Rounds 2s apart (Burrow keeps a commit only min-distance = 1s after
	// the previous one); kretry scans once a round over a window of 3
	// scans, Burrow evaluates its last 3 commits (intervals = 3).
	mon, err := lag.New(newClient(t, addr), lag.Config{Groups: groups, Window: 3, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	var snap *lag.Snapshot
	for i := range 5 {
		for _, s := range scenarios {
			if s.round != nil {
				s.round(i)
			}
		}
		if snap, err = mon.Scan(ctx); err != nil {
			t.Fatalf("kretry lag scan: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	if snap, err = mon.Scan(ctx); err != nil {
		t.Fatalf("kretry lag scan: %v", err)
	}

	var table strings.Builder
	fmt.Fprintf(&table, "\n| scenario | kretry status | kretry lag | Burrow status | Burrow lag |\n|---|---|---|---|---|\n")
	for _, s := range scenarios {
		var row *lag.Row
		for i := range snap.Rows {
			if r := &snap.Rows[i]; r.Group == s.group && r.Topic == s.topic {
				row = r
			}
		}
		if row == nil {
			t.Errorf("%s: kretry has no row for %s", s.name, s.group)
			continue
		}
		wantLag := s.burrowLag
		if wantLag < 0 {
			wantLag = row.Lag
		}
		var bst burrowStatus
		// Burrow evaluates on request from what it has stored; give it a
		// moment for the latest broker offsets.
		ok := poll(10*time.Second, func() bool {
			bst, err = ask(s.group)
			return err == nil && len(bst.Status.Partitions) == 1 && bst.Status.Partitions[0].Status == s.burrowStatus &&
				bst.Status.Partitions[0].CurrentLag == wantLag
		})
		pst, blag := "none", int64(-1)
		if len(bst.Status.Partitions) > 0 {
			pst, blag = bst.Status.Partitions[0].Status, bst.Status.Partitions[0].CurrentLag
		}
		if !ok {
			t.Errorf("%s: Burrow answers partition status %s, current_lag %d (group %s, err %v), want %s and %d",
				s.name, pst, blag, bst.Status.Status, err, s.burrowStatus, wantLag)
		}
		if row.Status != s.kretryStatus {
			t.Errorf("%s: kretry status %v, want %v (lag %d, committed %d, end %d)", s.name, row.Status, s.kretryStatus, row.Lag, row.Committed, row.End)
		}
		if s.kretryStatus == lag.StatusOK && row.Lag != s.kretryLag {
			t.Errorf("%s: kretry lag %d, want %d", s.name, row.Lag, s.kretryLag)
		}
		fmt.Fprintf(&table, "| %s | %v | %d | %s (group %s) | %d |\n", s.name, row.Status, row.Lag, pst, bst.Status.Status, blag)
	}
	t.Logf("side by side (embedded broker):%s", table.String())
}
