package telemetry_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/kretry/kretry/internal/telemetry"
	"github.com/kretry/kretry/pkg/delivery"
)

func TestOTLPTracesURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://collector:4318":              "http://collector:4318/v1/traces",
		"http://collector:4318/":             "http://collector:4318/v1/traces",
		"https://otel.example.com/v1/traces": "https://otel.example.com/v1/traces",
		"https://otel.example.com/custom":    "https://otel.example.com/custom",
	} {
		if got, err := telemetry.OTLPTracesURL(in); err != nil || got != want {
			t.Errorf("OTLPTracesURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "collector:4318", "grpc://collector:4317", "http://", "::"} {
		if got, err := telemetry.OTLPTracesURL(bad); err == nil {
			t.Errorf("OTLPTracesURL(%q) = %q, want an error", bad, got)
		}
	}
	if _, err := telemetry.NewTracing(t.Context(), telemetry.TracingOptions{}); err == nil {
		t.Error("NewTracing without endpoint or exporter: no error")
	}
}

// TestTracingOTLPExport: with an endpoint, spans reach an OTLP/HTTP
// collector (here an httptest server) as protobuf on /v1/traces, at the
// latest when Shutdown flushes the batch.
func TestTracingOTLPExport(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies [][]byte
		paths  []string
	)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies, paths = append(bodies, b), append(paths, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	tr, err := telemetry.NewTracing(t.Context(), telemetry.TracingOptions{Endpoint: collector.URL, ServiceName: "orders-sidecar"})
	if err != nil {
		t.Fatal(err)
	}
	d := delivery.TraceDeliveries(delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil }),
		tr.TracerProvider(), "orders-kretry", delivery.DefaultStatuses)
	_ = d.Deliver(t.Context(), message(1, traceHeaders()...))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) == 0 {
		t.Fatal("the collector received nothing")
	}
	if paths[0] != "POST /v1/traces application/x-protobuf" {
		t.Errorf("request %q, want POST /v1/traces application/x-protobuf", paths[0])
	}
	traceID, _ := trace.TraceIDFromHex(producerTraceID)
	all := bytes.Join(bodies, nil)
	for _, want := range [][]byte{[]byte("process orders"), traceID[:], []byte("orders-sidecar")} {
		if !bytes.Contains(all, want) {
			t.Errorf("the export lacks %q", want)
		}
	}
}

// TestTracingExportFailureLogged: a collector that refuses the spans
// costs one warning line, not an error per batch on stderr.
func TestTracingExportFailureLogged(t *testing.T) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadRequest) // not retried by the exporter
	}))
	defer collector.Close()
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	tr, err := telemetry.NewTracing(t.Context(), telemetry.TracingOptions{Endpoint: collector.URL, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	d := delivery.TraceDeliveries(delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil }),
		tr.TracerProvider(), "orders-kretry", delivery.DefaultStatuses)
	_ = d.Deliver(t.Context(), message(1))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v (an export failure is logged, not returned)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "spans could not be exported"); n != 1 {
		t.Errorf("%d warning lines, want 1:\n%s", n, logs.String())
	}
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// BenchmarkTraceDeliveries measures what a traced attempt adds to a
// delivery: extracting the producer's context, one sampled span with its
// attributes, handed to a batch processor.
func BenchmarkTraceDeliveries(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	defer tp.Shutdown(context.Background())
	h := delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil })
	for _, bc := range []struct {
		name string
		d    delivery.Deliverer
	}{{"untraced", h}, {"traced", delivery.TraceDeliveries(h, tp, "orders-kretry", delivery.DefaultStatuses)}} {
		b.Run(bc.name, func(b *testing.B) {
			m := message(1, traceHeaders()...)
			b.ReportAllocs()
			for b.Loop() {
				_ = bc.d.Deliver(b.Context(), m)
			}
		})
	}
}
