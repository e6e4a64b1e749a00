// Package kafkatest runs real Apache Kafka brokers (KRaft, combined
// broker+controller nodes) as subprocesses on loopback ports, for kretry's
// tests and benchmarks.
//
// The broker comes from Maven Central: pom.xml beside this file names
// org.apache.kafka:kafka_2.13 and a log4j2 binding, and [Jars] copies them
// with their runtime dependencies into a cache folder once (about 100 MB,
// 10–60 s on the first run, nothing after). java (17+) and mvn must be on
// PATH; where either is missing, [Available] says which, and tests skip with
// that line.
//
// A [Cluster] is one or three nodes. Each node's data lives in a temporary
// folder; [Cluster.Kill] sends SIGKILL (a crash, nothing flushed),
// [Cluster.Restart] starts the node again on the same ports and data, and
// [Cluster.Stop] kills every node and removes the data. Nodes are started
// with a parent-death signal, so a test binary that crashes leaves no broker
// behind.
//
// [Config.Security] adds secured client listeners beside the PLAINTEXT one
// (which the nodes use among themselves): SASL_SSL with SCRAM-SHA-512
// users created through the admin API, and SSL with client certificates
// required. The CA, the brokers' certificate and a client certificate are
// made in Go (crypto/x509, ECDSA P-256) for each cluster and written as PEM
// files ([Cluster.TLS]), which Kafka reads as PEM key and trust stores.
//
// [Kinds] reads KRETRY_TEST_BROKER (embedded | kafka | both, default both)
// and [RunMain] runs a package's tests once per kind, so every correctness
// test runs on kfake and on Kafka from one `go test`.
package kafkatest
