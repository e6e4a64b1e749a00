package demo

// The demo's workload: the orders it produces and the app that answers
// them, each record's fate fixed by its ce-id (BehaviourOf).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/internal/check"
	"github.com/kretry/kretry/pkg/delivery"
)

// order is the demo's record value.
type order struct {
	OrderID  int     `json:"order_id"`
	Customer string  `json:"customer"`
	Item     string  `json:"item"`
	Quantity int     `json:"quantity"`
	Price    float64 `json:"price"`
}

var items = []string{"keyboard", "monitor", "cable", "dock", "mouse", "headset", "webcam"}

// produce writes n keyed order records and notes each in the ledger.
func produce(ctx context.Context, addrs []string, topic string, n int, l *check.Ledger, ord *check.Order) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		ok   int
	)
	for i := range n {
		cust := "customer-" + strconv.Itoa(i%max(97, n/5))
		v, _ := json.Marshal(order{OrderID: 100000 + i, Customer: cust, Item: items[i%len(items)], Quantity: 1 + i%5, Price: float64(1+i%50) * 9.99})
		r := &kgo.Record{Topic: topic, Key: []byte(cust), Value: v, Headers: []kgo.RecordHeader{
			{Key: "content-type", Value: []byte("application/json")},
			{Key: "source", Value: []byte("kretry-demo")},
		}}
		wg.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			ok++
			id := r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
			l.Produced(id)
			ord.Produced(string(r.Key), id) // promises of one partition run in offset order
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return ok, fmt.Errorf("producing demo records: %d failed, first: %w", len(errs), errs[0])
	}
	return ok, nil
}

// Behaviour is what the sample app does with a record, by its ce-id.
type Behaviour int

const (
	OK          Behaviour = iota // 200
	FlakyTwice                   // 503, 503, then 200
	Permanent                    // 422 always
	TimeoutOnce                  // no answer within app.timeout once, then 200
	AlwaysFlaky                  // 503 always
)

// BehaviourOf returns the sample app's behaviour for ce-id id.
func BehaviourOf(id string) Behaviour {
	h := fnv.New32a()
	h.Write([]byte(id))
	switch v := h.Sum32() % 100; {
	case v < 8:
		return FlakyTwice
	case v < 11:
		return Permanent
	case v < 12:
		return TimeoutOnce
	case v < 14:
		return AlwaysFlaky
	default:
		return OK
	}
}

type app struct {
	srv  *http.Server
	addr string
}

func (a *app) Close() { a.srv.Close() }

// startApp serves the sample app on a free loopback port.
func startApp(l *check.Ledger, ord *check.Order) (*app, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{} // deliveries per ce-id
	)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := delivery.MessageFromRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen[m.ID]++
		n := seen[m.ID]
		mu.Unlock()
		var o order
		if err := json.Unmarshal(m.Value, &o); err != nil {
			http.Error(w, "order is not JSON: "+err.Error(), http.StatusUnprocessableEntity)
			return
		}
		switch BehaviourOf(m.ID) {
		case FlakyTwice:
			if n <= 2 {
				http.Error(w, "inventory service unavailable", http.StatusServiceUnavailable)
				return
			}
		case Permanent:
			http.Error(w, fmt.Sprintf("order %d: quantity %d exceeds the customer's limit", o.OrderID, o.Quantity), http.StatusUnprocessableEntity)
			return
		case TimeoutOnce:
			if n == 1 {
				select {
				case <-time.After(2 * AppTimeout):
				case <-r.Context().Done():
				}
				return // the sidecar has given up by now; this answer is not read
			}
		case AlwaysFlaky:
			w.Header().Set("Retry-After", "0")
			http.Error(w, "payment provider down", http.StatusServiceUnavailable)
			return
		}
		l.Acked(m.ID)
		ord.Acked(m.ID)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("demo app", "err", err)
		}
	}()
	return &app{srv: srv, addr: ln.Addr().String()}, nil
}
