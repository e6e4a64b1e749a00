package lag

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"time"

	"github.com/kretry/kretry/internal/offsetmap"
)

// Row is one group's position in one partition, as one scan saw it.
type Row struct {
	Group     string
	Topic     string
	Partition int32
	// Source and Stage place the topic in a kretry pipeline; both are ""
	// for a topic of a foreign group.
	Source, Stage string

	// Committed is the group's committed offset, -1 when it has none.
	Committed int64
	// LogStart is the log start offset, HighWatermark the high watermark
	// (the end offset), LastStable the last stable offset (-1 when not
	// listed: only topics read committed need it).
	LogStart, HighWatermark, LastStable int64
	// End is where the lag ends: LastStable for groups that read
	// committed, HighWatermark otherwise.
	End int64
	// Lag is End minus the committed offset, in records (offsets), with
	// the cases of Compute; -1 when Error is set.
	Lag int64
	// Age is how long the next record to consume has been in the log:
	// now minus the timestamp of the first record at or after the
	// committed offset (clamped at 0 against producer clock skew). 0 when
	// the lag is 0. Only meaningful when AgeKnown; the record could not be
	// read within the scan's timeout otherwise.
	Age      time.Duration
	AgeKnown bool

	// DrainRate is the consume rate over the status window, in records
	// per second (see DrainRate); only meaningful when DrainRateKnown.
	DrainRate      float64
	DrainRateKnown bool
	// TimeToDrain is Lag ÷ DrainRate in seconds (see TimeToDrain): 0 when
	// caught up, +Inf when lagging with a drain rate of 0. Only
	// meaningful when TimeToDrainKnown.
	TimeToDrain      float64
	TimeToDrainKnown bool

	Flags
	// Assigned: a live member of the group holds the partition.
	Assigned bool
	// Wait is the topic's by-design wait (see Topic.Wait).
	Wait   time.Duration
	Status Status
	// Error says why the partition could not be measured; Status is
	// StatusErr then, and Lag -1.
	Error string

	readCommitted bool
}

// Flags mark the edge cases of a row's lag (see Compute).
type Flags struct {
	// NoCommit: the group has no committed offset here; the lag counts
	// from the log start.
	NoCommit bool
	// Clamped: the committed offset is below the log start (retention
	// deleted records the group never read); the lag counts from the log
	// start, the records that still exist.
	Clamped bool
	// PastEnd: the committed offset is beyond End (a topic recreated
	// under the group, or a commit ahead of the last stable offset); the
	// lag is 0.
	PastEnd bool
	// MarkersOnly: between the committed offset and End there are only
	// transaction markers and aborted records, nothing to consume; the lag
	// is 0 (the offsets are not records).
	MarkersOnly bool
	// DoneAhead counts the offsets past the committed offset that the
	// commit's metadata marks done: kretry commits out of offset order
	// (the offset of its first record not done, and which records past it
	// are; pkg/engine progress.go). They are not counted in the lag.
	DoneAhead int64
}

type rowJSON struct {
	Group         string   `json:"group,omitempty"`
	Topic         string   `json:"topic"`
	Partition     int32    `json:"partition"`
	Source        string   `json:"source,omitempty"`
	Stage         string   `json:"stage,omitempty"`
	Committed     int64    `json:"committed"`
	LogStart      int64    `json:"log_start"`
	HighWatermark int64    `json:"high_watermark"`
	LastStable    int64    `json:"last_stable"`
	End           int64    `json:"end"`
	Lag           int64    `json:"lag"`
	AgeSeconds    float64  `json:"age_seconds"`
	AgeKnown      bool     `json:"age_known"`
	DrainRate     *float64 `json:"drain_rate,omitempty"`
	TimeToDrain   *float64 `json:"time_to_drain_seconds,omitempty"`
	NoCommit      bool     `json:"no_commit,omitempty"`
	Clamped       bool     `json:"clamped,omitempty"`
	PastEnd       bool     `json:"past_end,omitempty"`
	MarkersOnly   bool     `json:"markers_only,omitempty"`
	DoneAhead     int64    `json:"done_ahead,omitempty"`
	Assigned      bool     `json:"assigned"`
	Status        Status   `json:"status"`
	Error         string   `json:"error,omitempty"`
}

// MarshalJSON writes the row with snake_case keys, the age in seconds
// (age_seconds, with age_known), drain_rate in records per second (absent
// when unknown) and time_to_drain_seconds (absent when unknown, and when
// infinite: a drain_rate of 0 with lag above 0; JSON has no +Inf).
func (r Row) MarshalJSON() ([]byte, error) {
	var rate, ttd *float64
	if r.DrainRateKnown {
		rate = &r.DrainRate
	}
	if r.TimeToDrainKnown && !math.IsInf(r.TimeToDrain, 0) {
		ttd = &r.TimeToDrain
	}
	return json.Marshal(rowJSON{
		DrainRate: rate, TimeToDrain: ttd,
		Group: r.Group, Topic: r.Topic, Partition: r.Partition, Source: r.Source, Stage: r.Stage,
		Committed: r.Committed, LogStart: r.LogStart, HighWatermark: r.HighWatermark,
		LastStable: r.LastStable, End: r.End, Lag: r.Lag,
		AgeSeconds: r.Age.Seconds(), AgeKnown: r.AgeKnown,
		NoCommit: r.NoCommit, Clamped: r.Clamped, PastEnd: r.PastEnd, MarkersOnly: r.MarkersOnly,
		DoneAhead: r.DoneAhead, Assigned: r.Assigned, Status: r.Status, Error: r.Error,
	})
}

// Snapshot is the result of one scan.
type Snapshot struct {
	// Time the scan started, and how long it took.
	Time     time.Time     `json:"time"`
	Duration time.Duration `json:"-"`
	// Rows, sorted by group, then in pipeline order (source, tiers,
	// parking) or by topic, then by partition.
	Rows []Row `json:"rows"`
	// DLQ has one row per dead-letter partition, sorted by topic and
	// partition: its Lag is the number of records waiting (from the
	// DLQGroup's commit or the log start to the last stable offset) and its
	// Age the age of the oldest of them. Group is Config.DLQGroup; Status
	// is always OK there, or ERR.
	DLQ []Row `json:"dlq"`
	// Groups describes each scanned group.
	Groups []GroupInfo `json:"groups"`
	// Errors are the scan's problems that are not one partition's: a
	// request that failed, an expected topic that does not exist.
	Errors []string `json:"errors,omitempty"`
}

// MarshalJSON writes the snapshot with the duration in seconds
// (duration_seconds).
func (s *Snapshot) MarshalJSON() ([]byte, error) {
	type plain Snapshot
	return json.Marshal(struct {
		*plain
		DurationSeconds float64 `json:"duration_seconds"`
	}{(*plain)(s), s.Duration.Seconds()})
}

// GroupInfo is one group as the scan saw it.
type GroupInfo struct {
	Name string `json:"name"`
	// State is the group's state (Stable, Empty, Dead, …), "" when it
	// could not be described.
	State   string `json:"state"`
	Members int    `json:"members"`
	// Status is the worst status of the group's partitions.
	Status Status `json:"status"`
	Error  string `json:"error,omitempty"`
}

// StageSummary is one stage of a kretry pipeline: a source topic, one of
// its tiers, its parking topic or its DLQ.
type StageSummary struct {
	Source, Stage, Topic string
	// Records waiting in the stage (the pipeline group's lag summed over
	// the partitions; for the DLQ, the records from its log start or the
	// DLQ group's commit).
	Records int64
	// Age of the oldest waiting record, when AgeKnown.
	Age      time.Duration
	AgeKnown bool
	// Partial: some partitions could not be measured.
	Partial bool
}

// Stages sums the rows of kretry's pipelines per stage, sorted by source
// and then in pipeline order (source, tiers, parking, dlq).
func (s *Snapshot) Stages() []StageSummary {
	type key struct{ source, stage, topic string }
	idx := map[key]int{}
	var out []StageSummary
	add := func(r *Row) {
		if r.Stage == "" {
			return
		}
		k := key{r.Source, r.Stage, r.Topic}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, StageSummary{Source: r.Source, Stage: r.Stage, Topic: r.Topic, AgeKnown: true})
		}
		st := &out[i]
		if r.Error != "" {
			st.Partial = true
			return
		}
		st.Records += r.Lag
		if r.Lag > 0 {
			if !r.AgeKnown {
				st.AgeKnown = false
			} else if r.Age > st.Age {
				st.Age = r.Age
			}
		}
	}
	for i := range s.Rows {
		add(&s.Rows[i])
	}
	for i := range s.DLQ {
		add(&s.DLQ[i])
	}
	slices.SortStableFunc(out, func(a, b StageSummary) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(stageOrder(a.Stage), stageOrder(b.Stage)), cmp.Compare(a.Topic, b.Topic))
	})
	return out
}

// stageOrder sorts stages in pipeline order.
func stageOrder(s string) int {
	switch s {
	case StageSource:
		return 0
	case StageParking:
		return 1 << 20
	case StageDLQ:
		return 1<<20 + 1
	}
	var n int
	for _, c := range s[min(len(s), len("tier-")):] {
		if c < '0' || c > '9' {
			return 1<<20 - 1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// Compute is the lag arithmetic of one partition: the lag in records from
// the committed offset to end, and the offset the next record to consume
// is read from (for its age).
//
//   - no commit (committed < 0): from the log start, flagged NoCommit;
//   - committed below the log start (retention): from the log start,
//     flagged Clamped: records that no longer exist are not lag;
//   - committed past end: 0, flagged PastEnd: never negative;
//   - otherwise end − committed.
//
// end is the last stable offset for groups that read committed, which
// leaves out the records of open transactions; a tail of transaction
// markers is found by reading it (Flags.MarkersOnly), not here.
func Compute(committed, logStart, end int64) (lag, from int64, f Flags) {
	from = committed
	switch {
	case committed < 0:
		from, f.NoCommit = logStart, true
	case committed < logStart:
		from, f.Clamped = logStart, true
	}
	if from > end {
		// A commit past the end; or a log start past the end, which a
		// listing taken between two deletions can show.
		f.PastEnd = committed >= 0 && !f.Clamped
		return 0, end, f
	}
	return end - from, from, f
}

// DoneAhead is how many offsets in [committed, end) the commit's
// metadata meta marks done (package offsetmap: kretry's out-of-order
// commits); 0 for metadata of any other writer, or of another offset.
func DoneAhead(committed, end int64, meta string) int64 {
	if committed < 0 {
		return 0
	}
	m, err := offsetmap.Decode(committed, meta)
	if err != nil {
		return 0
	}
	hi := min(m.End, end)
	done := hi - committed
	for _, r := range m.Pending {
		if r.From >= hi {
			break
		}
		done -= min(r.To, hi) - r.From
	}
	return max(done, 0)
}

func sortRows(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Source, b.Source), cmp.Compare(stageOrder(a.Stage), stageOrder(b.Stage)),
			cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
}
