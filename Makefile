# kretry — the commands README.md names.
GO ?= go

.PHONY: test build demo vet fmt fault-long fault-overload

# The one test command (CI runs exactly this): go.mod and go.sum tidy in
# all three modules, first (go mod tidy -diff prints what is not, and fails), vet (the benchmark module in
# e2e/bench too, so an engine change cannot break it unnoticed, and its unit
# tests, which start no broker: how it books events and orders runs), then every
# test with the race detector, with a 25-minute limit. The correctness
# suites (pkg/engine, lag, e2e) run twice, on the embedded broker and on
# Apache Kafka (KRETRY_TEST_BROKER=embedded|kafka|both, default both; see
# internal/kafkatest). Tests that need kcat, prometheus/promtool, helm, or
# java and mvn skip with a message where they are absent (.ci/run installs
# them, and under CI=true a missing java or mvn is a failure). Last, the
# testcontainers module (e2e/containers, its own go.mod): the crash-and-
# restart scenario on a testcontainers Kafka where a Docker engine answers,
# a skip where none does.
# go test -json goes through internal/testsummary: the same run, printed as
# plain go test prints it (ok/FAIL lines, failures' output), then one line
# per distinct skip reason with counts and a closing "tests: N passed, N
# failed, N skipped". bash for pipefail (make's /bin/sh is dash): go
# test's own exit status still decides, and the summarizer fails too on any
# failure, build failure or crash it sees.
test:
	$(GO) mod tidy -diff
	cd e2e/bench && $(GO) mod tidy -diff
	cd e2e/containers && $(GO) mod tidy -diff
	$(GO) vet ./...
	cd e2e/bench && $(GO) vet ./... && $(GO) test -count=1 ./...
	bash -o pipefail -c '$(GO) test -json -race -count=1 -timeout 25m ./... 2>&1 | $(GO) run ./internal/testsummary'
	cd e2e/containers && $(GO) vet ./... && $(GO) test -count=1 ./...

# The long fault suite: 100,000 records on a three-node Kafka cluster with
# ten kretry kills, broker kills and a rolling restart (about 15 minutes);
# prints the table docs/RELIABILITY.md records. No race detector: it
# measures.
fault-long:
	KRETRY_TEST_BROKER=kafka KRETRY_TEST_FAULT=long $(GO) test -count=1 -timeout 40m -run TestFaultSuite -v ./e2e/

# The short fault suite with the breaker and the guard on (their
# defaults): the same checks but the delivery bound (about 2-5 minutes).
fault-overload:
	KRETRY_TEST_BROKER=kafka KRETRY_TEST_FAULT=overload $(GO) test -race -count=1 -timeout 20m -run TestFaultSuite -v ./e2e/

build:
	$(GO) build -o bin/kretry ./cmd/kretry

demo:
	$(GO) run ./cmd/kretry demo

fmt:
	gofmt -l -w .
