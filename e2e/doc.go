// Package e2e holds kretry's whole-process tests: the kretry binary is built
// once, `kretry broker` runs as a real Kafka-protocol broker, `kretry run`
// runs as a subprocess delivering to an in-test HTTP application, and real
// clients (kcat, franz-go) produce and read the topics. The tests that need
// kcat skip with a message where it is not installed.
//
// When the tests run with -race, the binary is built with -race too, so a
// data race in a subprocess fails its test (exit status 66).
package e2e
