package gameday

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
)

// Kinds of records the load writes, in the record value.
const (
	kindSteady = "steady" // the steady load and the spike
	kindPoison = "poison" // the one poison record: answers 500 on every delivery
	kindBurst  = "burst"  // the synchronised failure: produced at once while the dependency blips
)

// order is a record value: the id is the load's sequence number, Produced
// the producer's clock in Unix nanoseconds (end-to-end latency).
type order struct {
	ID       int64  `json:"id"`
	Kind     string `json:"kind"`
	Key      string `json:"key"`
	Produced int64  `json:"produced_unix_nano"`
}

// arrival is one delivery as the app saw it.
type arrival struct {
	ID      int64
	Kind    string
	Key     string
	At      time.Time // when the request arrived
	Done    time.Time // when it was answered
	Seen    int       // 1 for the first delivery of this id, 2 for the next, …
	Attempt int       // the ce-attempt header (kretry); 0 for the blocking peer
	Status  int       // the answer
	Latency time.Duration
	E2E     time.Duration // Done − the record's produce time, for answers 2xx
}

// dependency is what the sample app depends on and the game day controls:
// a service with a fixed number of workers, each taking serviceTime per
// record (so its capacity is workers ÷ serviceTime records/s), that can be
// made slow or made to fail (503 at once) for a while.
type dependency struct {
	workers chan struct{}
	service atomic.Int64 // time.Duration per record
	failing atomic.Bool
}

// app is the sample application: it serves POST /orders as kretry (or the
// blocking peer) delivers, asks the dependency, and logs every delivery.
type app struct {
	dep *dependency
	srv *http.Server
	url string

	mu   sync.Mutex
	log  []arrival
	seen map[int64]int
	done map[int64]bool // answered 2xx at least once
}

func startApp(workers int, service time.Duration) (*app, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &app{dep: &dependency{workers: make(chan struct{}, workers)}, seen: map[int64]int{}, done: map[int64]bool{}}
	a.dep.service.Store(int64(service))
	a.srv = &http.Server{Handler: http.HandlerFunc(a.serve), ReadHeaderTimeout: 5 * time.Second}
	a.url = "http://" + ln.Addr().String() + "/orders"
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(err)
		}
	}()
	return a, nil
}

func (a *app) close() { a.srv.Close() }

func (a *app) serve(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	m, err := delivery.MessageFromRequest(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var o order
	if err := json.Unmarshal(m.Value, &o); err != nil {
		http.Error(w, "order is not JSON: "+err.Error(), http.StatusUnprocessableEntity)
		return
	}
	a.mu.Lock()
	a.seen[o.ID]++
	seen := a.seen[o.ID]
	a.mu.Unlock()
	status := a.answer(r.Context(), &o)
	if status == http.StatusNoContent {
		w.WriteHeader(status)
	} else {
		http.Error(w, statusText[status], status)
	}
	done := time.Now()
	ar := arrival{ID: o.ID, Kind: o.Kind, Key: o.Key, At: at, Done: done, Seen: seen, Attempt: m.Attempt,
		Status: status, Latency: done.Sub(at)}
	if status == http.StatusNoContent {
		ar.E2E = done.Sub(time.Unix(0, o.Produced))
	}
	a.mu.Lock()
	a.log = append(a.log, ar)
	if status == http.StatusNoContent {
		a.done[o.ID] = true
	}
	a.mu.Unlock()
}

var statusText = map[int]string{
	http.StatusInternalServerError: "cannot parse order: unexpected end of JSON input in field \"volume\"",
	http.StatusServiceUnavailable:  "inventory service unavailable",
}

// answer is the app's decision for one delivery: the poison record fails
// always, the rest goes to the dependency.
func (a *app) answer(ctx context.Context, o *order) int {
	switch {
	case o.Kind == kindPoison:
		return http.StatusInternalServerError
	case a.dep.failing.Load():
		return http.StatusServiceUnavailable
	}
	select {
	case a.dep.workers <- struct{}{}:
	case <-ctx.Done():
		return http.StatusServiceUnavailable
	}
	defer func() { <-a.dep.workers }()
	t := time.NewTimer(time.Duration(a.dep.service.Load()))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return http.StatusServiceUnavailable
	}
	if a.dep.failing.Load() {
		return http.StatusServiceUnavailable
	}
	return http.StatusNoContent
}

// arrivals returns a copy of the delivery log.
func (a *app) arrivals() []arrival {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]arrival(nil), a.log...)
}

// acked reports whether id was answered 2xx.
func (a *app) acked(id int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.done[id]
}
