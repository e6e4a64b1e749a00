package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/pkg/delivery"
)

// ceReceived is one event as the CloudEvents SDK decoded it, with the raw
// HTTP header for what the SDK does not model (kretry-tombstone).
type ceReceived struct {
	ev     cloudevents.Event
	header http.Header
	err    error // of Validate
}

// structuredCE is a record value that is a whole CloudEvent in the JSON
// format, with attributes of its producer's.
const structuredCE = `{"specversion":"1.0","id":"producer-1","source":"/producer","type":"com.example.created","datacontenttype":"application/json","data":{"a":1}}`

// TestCloudEventsSDK has the receiving app written with the CloudEvents Go
// SDK (sdk-go v2, its HTTP protocol and client receiver, as an app author
// would): every kretry delivery must decode as a valid CloudEvent whose
// attributes, extensions and data match the Kafka record, a tombstone
// included, and a retry must keep the id with the next attempt number.
func TestCloudEventsSDK(t *testing.T) {
	t.Parallel()
	_, addr := startBroker(t)
	createTopic(t, addr, "orders", 3)

	// The app: an SDK client receiving over HTTP on a loopback port. The
	// record with value "retry-me" is refused once with 503 (an SDK
	// result), so it comes back from the tier as attempt 2.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p, err := cloudevents.NewHTTP(cehttp.WithListener(ln), cehttp.WithPath("/kafka"), cehttp.WithRequestDataAtContextMiddleware())
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []ceReceived
	ctx, cancel := context.WithCancel(context.Background())
	recvDone := make(chan error, 1)
	go func() {
		recvDone <- c.StartReceiver(ctx, func(ctx context.Context, ev cloudevents.Event) cloudevents.Result {
			r := ceReceived{ev: ev.Clone(), err: ev.Validate()}
			if rd := cehttp.RequestDataFromContext(ctx); rd != nil {
				r.header = rd.Header.Clone()
			}
			mu.Lock()
			got = append(got, r)
			mu.Unlock()
			if string(ev.Data()) == "retry-me" && ev.Extensions()["attempt"] == "1" {
				return cehttp.NewResult(http.StatusServiceUnavailable, "busy")
			}
			return cloudevents.ResultACK
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-recvDone; err != nil {
			t.Errorf("SDK receiver: %v", err)
		}
	})

	ts := time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
	binary := []byte{0x00, 0xff, 0xfe, '\r', '\n', 0x80, 'x'}
	recs := []*kgo.Record{
		{Topic: "orders", Key: []byte("order-1"), Value: []byte(`{"order":1}`), Timestamp: ts,
			Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}, {Key: "trace", Value: []byte("abc")}}},
		{Topic: "orders", Key: binary, Value: binary, Timestamp: ts},
		{Topic: "orders", Key: nil, Value: []byte("no key"), Timestamp: ts},
		{Topic: "orders", Key: []byte("order-3"), Value: nil, Timestamp: ts}, // tombstone
		{Topic: "orders", Key: []byte(""), Value: []byte(""), Timestamp: ts}, // empty key, empty (non-null) value
		{Topic: "orders", Key: []byte("order-4"), Value: []byte("retry-me"), Timestamp: ts},
		// A record that is itself a structured CloudEvent, as a producer
		// in the Kafka binding's structured mode writes it.
		{Topic: "orders", Key: []byte("order-5"), Value: []byte(structuredCE), Timestamp: ts,
			Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/cloudevents+json; charset=UTF-8")}}},
	}
	ids := produceSync(t, newClient(t, addr), recs...)
	byID := map[string]*kgo.Record{}
	for i, id := range ids {
		byID[id] = recs[i]
	}

	const ceType = "com.example.order.v1"
	cfg := writeYAML(t, instanceYAML(addr, "http://"+ln.Addr().String()+"/kafka", "", fmt.Sprintf("ce_type: %q", ceType))+`topics:
  - name: orders
    retry:
      tiers: [200ms]
      jitter: 0
`)
	run := startKretry(t, "run", "run", "-c", cfg)
	received := func() []ceReceived {
		mu.Lock()
		defer mu.Unlock()
		return append([]ceReceived(nil), got...)
	}
	waitFor(t, 30*time.Second, "8 deliveries (7 records, one retried)", func() bool { return len(received()) >= 8 }, func() { run.mustRun(t) })
	if code := run.stop(t, 15*time.Second); code != 0 {
		t.Errorf("kretry run exited %d after SIGTERM, want 0", code)
	}

	all := received()
	if len(all) != 8 {
		t.Errorf("the SDK app received %d events, want 8", len(all))
	}
	attempts := map[string][]string{}
	for _, r := range all {
		ev := r.ev
		if r.err != nil {
			t.Errorf("event %s: the SDK's Validate: %v", ev.ID(), r.err)
		}
		rec, ok := byID[ev.ID()]
		if !ok {
			t.Errorf("event id %q is no produced record's <topic>/<partition>/<offset>", ev.ID())
			continue
		}
		ext := ev.Extensions()
		attempts[ev.ID()] = append(attempts[ev.ID()], fmt.Sprint(ext["attempt"]))
		check := func(what string, got, want any) {
			t.Helper()
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("event %s: %s = %q, want %q", ev.ID(), what, got, want)
			}
		}
		check("specversion", ev.SpecVersion(), "1.0")
		check("source", ev.Source(), "kafka:///orders")
		check("type", ev.Type(), ceType)
		if !ev.Time().Equal(rec.Timestamp) {
			t.Errorf("event %s: time = %v, want the record timestamp %v", ev.ID(), ev.Time(), rec.Timestamp)
		}
		check("extension kafkatopic", ext["kafkatopic"], "orders")
		check("extension kafkapartition", ext["kafkapartition"], strconv.Itoa(int(rec.Partition)))
		check("extension kafkaoffset", ext["kafkaoffset"], strconv.FormatInt(rec.Offset, 10))
		if rec.Key == nil {
			if v, ok := ext["kafkakey"]; ok {
				t.Errorf("event %s: extension kafkakey = %q for a null key, want it absent", ev.ID(), v)
			}
		} else {
			check("extension kafkakey", ext["kafkakey"], base64.StdEncoding.EncodeToString(rec.Key))
		}
		// A record's own content-type is the datacontenttype, except a
		// CloudEvents format (application/cloudevents…), which in HTTP
		// means structured mode: the SDK would take the body for the
		// event and drop kretry's attributes.
		wantCT := delivery.DefaultContentType
		if len(rec.Headers) > 0 && string(rec.Headers[0].Value) == "application/json" {
			wantCT = "application/json"
		}
		check("datacontenttype", ev.DataContentType(), wantCT)
		if !bytes.Equal(ev.Data(), rec.Value) {
			t.Errorf("event %s: data %q, want the record value %q byte for byte", ev.ID(), ev.Data(), rec.Value)
		}
		tomb := r.header.Get(delivery.HeaderTombstone)
		switch {
		case rec.Value == nil && (tomb != delivery.TombstoneMarker || len(ev.Data()) != 0):
			t.Errorf("event %s: a tombstone arrived with %s=%q and %d data bytes, want %q and none", ev.ID(), delivery.HeaderTombstone, tomb, len(ev.Data()), delivery.TombstoneMarker)
		case rec.Value != nil && tomb != "":
			t.Errorf("event %s: %s=%q on a record with a value", ev.ID(), delivery.HeaderTombstone, tomb)
		}
		if hs, err := delivery.DecodeKafkaHeaders(r.header); err != nil || len(hs) != len(rec.Headers) {
			t.Errorf("event %s: record headers from the HTTP request %v (err %v), want %d", ev.ID(), hs, err, len(rec.Headers))
		}
	}
	for id, as := range attempts {
		want := "[1]"
		if string(byID[id].Value) == "retry-me" {
			want = "[1 2]"
		}
		if fmt.Sprint(as) != want {
			t.Errorf("event %s: attempt extensions in order %v, want %s", id, as, want)
		}
	}
	if len(attempts) != len(recs) {
		t.Errorf("events for %d records, want %d", len(attempts), len(recs))
	}
}
