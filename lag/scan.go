package lag

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// scan is one Scan's state, filled phase by phase: the groups' commits
// and assignments, the topics' metadata, their offsets, then the rows.
type scan struct {
	m      *Monitor
	snap   *Snapshot
	errs   []error
	groups []Group
	names  []string // the groups' names and the DLQ group's

	commits  map[string]kadm.OffsetResponses
	groupErr map[string]error
	assigned map[string]map[string]map[int32]bool // group → topic → partition

	meta               map[string]topicMeta
	starts, hwms, lsos offsetMap
}

// listed is one partition's answer to a ListOffsets.
type listed struct {
	offset int64
	err    error
}

type offsetMap map[string]map[int32]listed

func (o offsetMap) get(t string, p int32) (listed, bool) {
	l, ok := o[t][p]
	return l, ok
}

// Scan runs one scan and returns its snapshot, also when it is incomplete:
// the partitions it could not measure have status ERR and an Error, and
// the returned error joins what went wrong (nil when nothing did). Scans
// do not overlap: a second caller waits for the first.
//
// Requests per scan, each under Config.Timeout: one OffsetFetch for all
// groups and one DescribeGroups (per group coordinator), one Metadata,
// then per partition leader one ListOffsets for the log start offsets, one
// for the high watermarks and, for topics read committed, one for the last
// stable offsets (a ListOffsets asks one offset per partition at one
// isolation level); then the record fetch for the ages of the lagging
// partitions, one Fetch per leader and isolation level per round.
func (m *Monitor) Scan(ctx context.Context) (*Snapshot, error) {
	m.scanMu.Lock()
	defer m.scanMu.Unlock()
	start := m.now()
	s := &scan{m: m, snap: &Snapshot{Time: start}, groups: slices.Clone(m.cfg.Groups)}
	for _, g := range s.groups {
		s.names = append(s.names, g.Name)
	}
	if m.cfg.DLQGroup != "" && !slices.Contains(s.names, m.cfg.DLQGroup) {
		s.names = append(s.names, m.cfg.DLQGroup)
	}
	s.readGroups(ctx)
	topics := s.topics()
	meta, err := m.metadata(ctx, topics)
	if err != nil {
		s.fail(fmt.Errorf("metadata: %w", err))
		rows, dlq := m.failedRows(err)
		return m.finish(s.snap, rows, dlq, s.errs)
	}
	s.meta = meta
	s.listOffsets(ctx, topics)
	rows, dlqRows := s.groupRows(), s.dlqRows()
	m.ages(ctx, start, meta, rows, dlqRows)
	return m.finish(s.snap, rows, dlqRows, s.errs)
}

func (s *scan) fail(err error) {
	s.errs = append(s.errs, err)
	s.snap.Errors = append(s.snap.Errors, err.Error())
}

// readGroups fetches the groups' commits and descriptions, both at once,
// and adds each group's GroupInfo to the snapshot.
func (s *scan) readGroups(ctx context.Context) {
	var (
		fetched   kadm.FetchOffsetsResponses
		described kadm.DescribedGroups
		descErr   error
		wg        sync.WaitGroup
	)
	if len(s.names) > 0 {
		wg.Go(func() {
			c, cancel := s.m.call(ctx)
			defer cancel()
			fetched = s.m.adm.FetchManyOffsets(c, s.names...)
		})
		wg.Go(func() {
			c, cancel := s.m.call(ctx)
			defer cancel()
			described, descErr = s.m.adm.DescribeGroups(c, s.names...)
		})
		wg.Wait()
	}
	if descErr != nil && len(described) == 0 {
		s.fail(fmt.Errorf("describe groups: %w", descErr))
	}
	s.commits, s.groupErr = map[string]kadm.OffsetResponses{}, map[string]error{}
	for _, name := range s.names {
		r, ok := fetched[name]
		switch {
		case !ok:
			s.groupErr[name] = errors.New("no offset fetch answer")
		case r.Err != nil && !errors.Is(r.Err, kerr.GroupIDNotFound):
			s.groupErr[name] = r.Err
		default:
			// A group that does not exist (any more) has no commits.
			s.commits[name] = r.Fetched
		}
		if err := s.groupErr[name]; err != nil {
			s.fail(fmt.Errorf("group %q: fetch offsets: %w", name, err))
		}
	}
	s.assigned = map[string]map[string]map[int32]bool{}
	for _, name := range s.names {
		s.snap.Groups = append(s.snap.Groups, s.groupInfo(name, described, descErr))
	}
}

// groupInfo is group name's GroupInfo; it records the group's assignment.
func (s *scan) groupInfo(name string, described kadm.DescribedGroups, descErr error) GroupInfo {
	info := GroupInfo{Name: name}
	d, ok := described[name]
	switch {
	case ok && d.Err == nil:
		info.State, info.Members = d.State, len(d.Members)
		a := map[string]map[int32]bool{}
		for t, ps := range d.AssignedPartitions() {
			a[t] = map[int32]bool{}
			for p := range ps {
				a[t][p] = true
			}
		}
		s.assigned[name] = a
	case ok:
		info.Error = d.Err.Error()
	case descErr != nil:
		info.Error = descErr.Error()
	}
	if err := s.groupErr[name]; err != nil {
		info.Error = err.Error()
	}
	return info
}

// groupTopics is the topics of group g: configured, committed or assigned.
func (s *scan) groupTopics(g Group) map[string]bool {
	ts := map[string]bool{}
	for _, t := range g.Topics {
		ts[t.Name] = true
	}
	for t := range s.commits[g.Name] {
		ts[t] = true
	}
	for t := range s.assigned[g.Name] {
		ts[t] = true
	}
	return ts
}

// topics is every topic to look at, sorted: the groups' and the DLQs.
func (s *scan) topics() []string {
	seen := map[string]bool{}
	for _, g := range s.groups {
		for t := range s.groupTopics(g) {
			seen[t] = true
		}
	}
	for _, d := range s.m.cfg.DLQs {
		seen[d.Topic] = true
	}
	return slices.Sorted(mapKeys(seen))
}

// listOffsets lists the log start offsets and high watermarks of every
// partition of topics, and the last stable offsets of the topics read
// committed (those of read-committed groups, and the DLQs), at once.
func (s *scan) listOffsets(ctx context.Context, topics []string) {
	committed := map[string]bool{}
	for _, g := range s.groups {
		if g.ReadCommitted {
			for t := range s.groupTopics(g) {
				committed[t] = true
			}
		}
	}
	for _, d := range s.m.cfg.DLQs {
		committed[d.Topic] = true
	}
	all, lsoParts := map[string][]int32{}, map[string][]int32{}
	for _, t := range topics {
		md, ok := s.meta[t]
		if !ok || md.err != nil {
			continue
		}
		all[t] = md.partitions
		if committed[t] {
			lsoParts[t] = md.partitions
		}
	}
	var listErrs [3]error
	var wg sync.WaitGroup
	wg.Go(func() { s.starts, listErrs[0] = s.m.listOffsets(ctx, all, -2, 0) })
	wg.Go(func() { s.hwms, listErrs[1] = s.m.listOffsets(ctx, all, -1, 0) })
	wg.Go(func() { s.lsos, listErrs[2] = s.m.listOffsets(ctx, lsoParts, -1, 1) })
	wg.Wait()
	for i, what := range []string{"log start", "high watermark", "last stable"} {
		if listErrs[i] != nil {
			s.fail(fmt.Errorf("list %s offsets: %w", what, listErrs[i]))
		}
	}
}

// row is the row of group's topic/p at offset committed (-1: none), read
// committed when rc; its end is the last stable offset then, else the
// high watermark.
func (s *scan) row(group string, rc bool, topic string, p int32, committed int64, meta string, commitErr error) Row {
	r := Row{Group: group, Topic: topic, Partition: p, Committed: committed, LastStable: -1, Lag: -1, readCommitted: rc}
	var e error
	st, ok1 := s.starts.get(topic, p)
	h, ok2 := s.hwms.get(topic, p)
	switch {
	case commitErr != nil:
		e = commitErr
	case !ok1 || !ok2:
		e = errors.New("offsets not listed")
	case st.err != nil:
		e = st.err
	case h.err != nil:
		e = h.err
	}
	r.LogStart, r.HighWatermark, r.End = st.offset, h.offset, h.offset
	if l, ok := s.lsos.get(topic, p); ok {
		if l.err == nil {
			r.LastStable = l.offset
		}
		if rc && e == nil {
			if l.err != nil {
				e = l.err
			}
			r.End = l.offset
		}
	} else if rc && e == nil {
		e = errors.New("last stable offset not listed")
	}
	if e != nil {
		r.Error = e.Error()
		return r
	}
	var from int64
	r.Lag, from, r.Flags = Compute(committed, r.LogStart, r.End)
	if from == committed {
		r.DoneAhead = DoneAhead(committed, r.End, meta)
		r.Lag -= r.DoneAhead
	}
	return r
}

// groupRows is a row per partition of each group's topics: every
// partition of a configured stage, and the others it commits or is
// assigned.
func (s *scan) groupRows() []Row {
	var rows []Row
	if prev := s.m.Latest(); prev != nil {
		rows = make([]Row, 0, len(prev.Rows))
	}
	for _, g := range s.groups {
		if err := s.groupErr[g.Name]; err != nil {
			rows = append(rows, s.m.failedGroupRows(g, err, s.meta)...)
			continue
		}
		stage := map[string]Topic{}
		for _, t := range g.Topics {
			stage[t.Name] = t
		}
		for _, t := range slices.Sorted(mapKeys(s.groupTopics(g))) {
			md, ok := s.meta[t]
			st, expected := stage[t]
			if !ok || md.err != nil {
				if expected {
					s.fail(fmt.Errorf("group %q: topic %q: %w%s", g.Name, t, cmpErr(md.err, kerr.UnknownTopicOrPartition), missingHint(md.err, st.Stage)))
				}
				continue // a deleted topic's commits are no series
			}
			for _, p := range md.partitions {
				c, hasCommit := s.commits[g.Name][t][p]
				if !expected && !hasCommit && !s.assigned[g.Name][t][p] {
					continue
				}
				committed, meta := int64(-1), ""
				var cerr error
				if hasCommit {
					committed, meta, cerr = c.At, c.Metadata, c.Err
				}
				r := s.row(g.Name, g.ReadCommitted, t, p, committed, meta, cerr)
				r.Assigned = s.assigned[g.Name][t][p]
				if expected {
					r.Source, r.Stage, r.Wait = st.Source, st.Stage, st.Wait
				}
				rows = append(rows, r)
			}
		}
	}
	return rows
}

// dlqRows is a row per DLQ partition, committed by the DLQ group if any.
func (s *scan) dlqRows() []Row {
	var rows []Row
	dg := s.m.cfg.DLQGroup
	for _, d := range s.m.cfg.DLQs {
		md, ok := s.meta[d.Topic]
		if !ok || md.err != nil {
			s.fail(fmt.Errorf("dlq %q: %w", d.Topic, cmpErr(md.err, kerr.UnknownTopicOrPartition)))
			continue
		}
		for _, p := range md.partitions {
			committed := int64(-1)
			var cerr error
			if dg != "" {
				if err := s.groupErr[dg]; err != nil {
					cerr = err
				} else if c, ok := s.commits[dg][d.Topic][p]; ok {
					committed, cerr = c.At, c.Err
				}
			}
			r := s.row(dg, true, d.Topic, p, committed, "", cerr)
			r.Source, r.Stage = d.Source, StageDLQ
			// Records wait in a DLQ by design: no commit is no flag there.
			r.NoCommit = false
			rows = append(rows, r)
		}
	}
	return rows
}
