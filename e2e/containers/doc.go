// Package containers runs kretry's crash-and-restart scenario against a
// Kafka broker started by testcontainers-go (modules/kafka), the way users
// with a Docker engine run the tests. It is its own module so that
// testcontainers and the Docker client it brings stay out of kretry's
// go.mod. Where no Docker engine answers, the test skips with a message
// saying so (this project's machines have none: the real-Kafka suites use
// internal/kafkatest, JVM brokers started from Maven Central).
package containers
