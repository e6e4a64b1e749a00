// Package gameday is `kretry gameday`: the seeds' backlog game day run
// against kretry and, for contrast, the blocking-retry peer
// (internal/blocking), each on topics of its own, against a sample app whose
// dependency it controls (app.go).
//
// A run is, per peer: the load (load.go) writes keyed records whose value
// carries an id and the produce time; the phases (phases.go) change the load
// and the dependency — steady, spike, slow, failing, poison, burst, drain —
// each waiting until the queue has caught up; a sampler (sample.go) scans
// the peer's group every ~100ms with kretry's lag monitor (package lag,
// reading the brokers' offsets) and reads kretry's /metrics, and a reader
// consumes the peer's DLQ read-committed. The checks (checks.go) judge what
// the brokers, /metrics, the DLQ and the app's delivery log show — never
// engine internals — and the report (report.go, answers.go) gives the
// figures, the seeds' four on-call questions answered, and a chart
// (chart.go). docs/GAMEDAY.md defines every check and limit.
package gameday
