// Package flow names the parts of one record's flow through kretry, once,
// for every package that speaks of them: the configuration (pkg/config),
// the engine (pkg/engine), the parking state (parking), the lag monitor
// (lag) and the metrics. A record is read from a stage (the source, a retry
// tier or the parking topic), delivered with an Outcome, and may be moved
// (MoveKind) to its next stage; the topic's Ordering and OnDeadLetter
// policy decide when its key is held back.
//
// The defaults that the YAML config and an embedding Go program share are
// defined here too (DefaultMaxInFlight, DefaultDeliveryTimeout, …), so that
// engine.Options left at zero behave like a config file that leaves the
// keys out (DESIGN.md, "Config").
//
// The package imports nothing of kretry's: every other package may use it.
package flow
