package retrytopics

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
)

// Redrive headers. A record redriven from the DLQ (package dlq) carries
// them right after the kretry header run, in this order, on every stage it
// reaches afterwards: its retry tiers and, when it fails again, the DLQ, so
// the count is kept across hops. A record never redriven has neither.
// They are not original headers: ReadOrigin strips them with the run and
// returns them in Origin.Redrives and Origin.RedriveID.
const (
	HeaderRedriveCount = "kretry-redrive-count" // times the record was redriven (decimal, ≥ 1)
	HeaderRedriveID    = "kretry-redrive-id"    // the redrive that moved it last
)

// readRedrive moves a leading redrive pair from o.Headers (the headers
// after the kretry run) into o.Redrives and o.RedriveID. A pair whose
// count is unreadable is left in place as original headers.
func readRedrive(o *Origin) {
	hs := o.Headers
	if len(hs) < 2 || hs[0].Key != HeaderRedriveCount || hs[1].Key != HeaderRedriveID {
		return
	}
	n, err := strconv.ParseInt(string(hs[0].Value), 10, 64)
	if err != nil || n < 1 {
		return
	}
	o.Redrives, o.RedriveID, o.Headers = n, string(hs[1].Value), hs[2:]
}

// appendRedrive appends o's redrive pair to hs when o was redriven.
func appendRedrive(hs []kgo.RecordHeader, o *Origin) []kgo.RecordHeader {
	if o.Redrives < 1 {
		return hs
	}
	return append(hs,
		kgo.RecordHeader{Key: HeaderRedriveCount, Value: []byte(strconv.FormatInt(o.Redrives, 10))},
		kgo.RecordHeader{Key: HeaderRedriveID, Value: []byte(o.RedriveID)})
}

// DLQRecord is what a DLQ record's kretry headers say about it.
type DLQRecord struct {
	Origin
	// Stage is kretry-stage: the DLQ topic it was written to.
	Stage string
	// Class, Status and Message are the error headers; Status is 0 when
	// there was none.
	Class   delivery.Class
	Status  int
	Message string
	// LastFailure is kretry-last-failure-time.
	LastFailure time.Time
	Group       string
}

// ReadDLQRecord reads the kretry headers of r, a record on a DLQ. It
// returns ErrBadHeaders, wrapped with the detail, when the header run is
// missing or unreadable (a record written to the DLQ by hand): such a
// record cannot be redriven, since its original coordinates (its ce-id) and
// original headers are unknown.
func ReadDLQRecord(r *kgo.Record) (DLQRecord, error) {
	o, err := ReadOrigin(r, false, 0)
	d := DLQRecord{Origin: o}
	if !hasKretryRun(r.Headers) {
		return d, err
	}
	v := func(name string) string {
		for _, h := range r.Headers[:len(Headers)] {
			if h.Key == name {
				return string(h.Value)
			}
		}
		return ""
	}
	d.Stage, d.Class, d.Message, d.Group = v(HeaderStage), delivery.Class(v(HeaderErrorClass)), v(HeaderErrorMessage), v(HeaderGroup)
	if s := v(HeaderErrorStatus); s != "" {
		n, perr := strconv.Atoi(s)
		if perr != nil && err == nil {
			err = fmt.Errorf("%w on %s/%d/%d: %s: %q is not a status", ErrBadHeaders, r.Topic, r.Partition, r.Offset, HeaderErrorStatus, s)
		}
		d.Status = n
	}
	if t, perr := time.Parse(time.RFC3339Nano, v(HeaderLastFailureTime)); perr == nil {
		d.LastFailure = t
	}
	return d, err
}

// Redrive describes one redrive's moves out of the DLQ (package dlq).
type Redrive struct {
	// Tier is the destination: the source's first retry tier.
	Tier string
	// ID is the redrive's id, written in kretry-redrive-id.
	ID string
	// Version is the kretry version doing it (kretry-version).
	Version string
	// MaxBytes is the tier's max.message.bytes (bytes; 0: no limit).
	MaxBytes int
}

// Record builds the record that moves DLQ record r back into kretry's
// pipeline: onto the tier, due at now, on r's partition (stages are
// co-partitioned). Key, value, the original coordinates (so the ce-id) and
// the original headers are r's; attempts start afresh (kretry-attempt 0:
// the next delivery is ce-attempt 1); the redrive count is r's plus one and
// kretry-redrive-id is rd.ID. The error headers keep the failure that
// dead-lettered r, for whoever reads the tier.
//
// It returns ErrBadHeaders (see ReadDLQRecord) for a record whose kretry
// headers are missing or unreadable.
func (rd *Redrive) Record(r *kgo.Record, now time.Time) (*kgo.Record, error) {
	d, err := ReadDLQRecord(r)
	if err != nil {
		return nil, err
	}
	o := d.Origin
	o.Attempts = 0
	if o.Redrives < math.MaxInt64 { // a forged count at the limit must not wrap negative (appendRedrive would drop the pair)
		o.Redrives++
	}
	o.RedriveID = rd.ID
	m := Move{
		Origin:   o,
		Key:      r.Key,
		Value:    r.Value,
		Topic:    rd.Tier,
		Due:      now,
		Failure:  Failure{Class: d.Class, Status: d.Status, Message: d.Message, At: d.LastFailure},
		Group:    d.Group,
		Version:  rd.Version,
		MaxBytes: rd.MaxBytes,
		Parked:   true, // not delivered since: kretry-attempt stays at Origin.Attempts, 0
	}
	out := m.Record()
	// Parked empties the failure headers; the redriven record keeps them.
	for i := range out.Headers[:len(Headers)] {
		switch out.Headers[i].Key {
		case HeaderLastFailureTime:
			if !d.LastFailure.IsZero() {
				out.Headers[i].Value = []byte(formatTime(d.LastFailure))
			}
		case HeaderErrorStatus:
			if d.Status != 0 {
				out.Headers[i].Value = []byte(strconv.Itoa(d.Status))
			}
		}
	}
	out.Partition = r.Partition
	out.Timestamp = now // retention on the tier counts from the move
	return out, nil
}
