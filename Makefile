# kretry — the commands README.md names.
GO ?= go

.PHONY: test build demo vet fmt

# The one test command (CI runs exactly this): vet (the benchmark module in
# e2e/bench too, so an engine change cannot break it unnoticed), then every
# test with the race detector. Tests that need kcat or prometheus/promtool
# skip with a message where they are absent (.ci/run installs them).
test:
	$(GO) vet ./...
	cd e2e/bench && $(GO) vet ./...
	$(GO) test -race -count=1 -timeout 15m ./...

build:
	$(GO) build -o bin/kretry ./cmd/kretry

demo:
	$(GO) run ./cmd/kretry demo

fmt:
	gofmt -l -w .
