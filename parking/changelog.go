package parking

import (
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names of op records.
const (
	// HeaderOp is the first header of every op record; its value is one of
	// the Op constants.
	HeaderOp = "kretry-parking-op"
	// HeaderRef is the op's argument (see the package doc).
	HeaderRef = "kretry-parking-ref"
	// HeaderOrigin is OriginOperator on an op written by an operator.
	HeaderOrigin = "kretry-parking-origin"
)

// Op kinds (the value of HeaderOp).
const (
	OpBlock   = "block"
	OpRelease = "release"
	OpSettle  = "settle"
	OpUnblock = "unblock"
	OpBarrier = "barrier"
)

// OriginOperator marks an op written by an operator, not by an engine.
const OriginOperator = "operator"

// VerdictOK is the release verdict of a head that was delivered.
const VerdictOK = "ok"

// Op is a decoded op record.
type Op struct {
	Kind   string
	Ref    string
	Origin string
}

// OpRecord builds an op record for partition p of topic; ref may be empty.
func OpRecord(topic string, p int32, key []byte, kind, ref string) *kgo.Record {
	hs := []kgo.RecordHeader{{Key: HeaderOp, Value: []byte(kind)}}
	if ref != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderRef, Value: []byte(ref)})
	}
	return &kgo.Record{Topic: topic, Partition: p, Key: key, Headers: hs, Timestamp: time.Now()}
}

// OperatorRelease builds the op record that releases key on partition p of
// the parking topic: a key held after its head was dead-lettered under
// on_dead_letter: hold gets its parked records delivered. A release of a
// key that is not held changes nothing.
func OperatorRelease(topic string, p int32, key []byte) *kgo.Record {
	r := OpRecord(topic, p, key, OpRelease, "release")
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderOrigin, Value: []byte(OriginOperator)})
	return r
}

// ParseOp decodes r as an op record. ok is false for a parked record (or
// anything whose first header is not HeaderOp).
func ParseOp(r *kgo.Record) (op Op, ok bool) {
	if len(r.Headers) == 0 || r.Headers[0].Key != HeaderOp {
		return Op{}, false
	}
	op.Kind = string(r.Headers[0].Value)
	for _, h := range r.Headers[1:] {
		switch h.Key {
		case HeaderRef:
			op.Ref = string(h.Value)
		case HeaderOrigin:
			op.Origin = string(h.Value)
		}
	}
	return op, true
}

// ReleaseRef is the HeaderRef of a release op: "<verdict> <ce-id>".
func ReleaseRef(verdict, id string) string { return verdict + " " + id }

// SplitRef splits a release op's HeaderRef into its verdict and ce-id.
func SplitRef(ref string) (verdict, id string) {
	verdict, id, _ = strings.Cut(ref, " ")
	return verdict, id
}
