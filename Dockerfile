# kretry container image (the sidecar image of charts/kretry).
#
#   docker build -t kretry:dev --build-arg VERSION=dev .
#
# NOTE: this Dockerfile has not been built here: the development and CI
# environment has no Docker engine, so neither `make test` nor .ci/run
# exercises it. The chart's tests (e2e/helm_test.go) render the chart; they
# do not run this image.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so the download layer survives source changes. go.mod
# replaces kfake with internal/thirdparty/kfake, whose go.mod the module
# graph needs before anything can be downloaded.
COPY go.mod go.sum ./
COPY internal/thirdparty/kfake/go.mod internal/thirdparty/kfake/
RUN go mod download
COPY . .
# VERSION is written in the kretry-version header of every moved record.
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -ldflags "-X github.com/kretry/kretry/pkg/flow.Version=${VERSION}" -o /kretry ./cmd/kretry

# Static binary, no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /kretry /kretry
# Numeric (distroless's nonroot user): Kubernetes' runAsNonRoot can only
# verify a numeric UID.
USER 65532:65532
# /metrics, /healthz, /readyz when metrics.listen is 0.0.0.0:9464.
EXPOSE 9464
ENTRYPOINT ["/kretry"]
CMD ["run", "-c", "/etc/kretry/config.yaml"]
