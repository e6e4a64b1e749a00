package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/kretry/kretry/pkg/delivery"
)

// A Go program that embeds the engine delivers through a HandlerFunc and
// chooses the route of a failure with Permanent and Transient; Classify
// routes it exactly as it would route an HTTP answer.
func Example() {
	var d delivery.Deliverer = delivery.HandlerFunc(func(ctx context.Context, m *delivery.Message) error {
		var order struct {
			SKU string `json:"sku"`
		}
		switch {
		case m.Value == nil:
			return nil // tombstone: nothing to do
		case json.Unmarshal(m.Value, &order) != nil:
			// Retrying will not fix the record: straight to the DLQ.
			return delivery.Permanent(fmt.Errorf("record %s: not an order", m.ID))
		case m.Attempt < 3:
			// Pretend the stock service is down for the first two attempts.
			return delivery.Transient(errors.New("stock service unavailable"))
		}
		return nil
	})

	for _, m := range []*delivery.Message{
		{ID: "orders/0/1", Value: []byte(`{"sku":"a"}`), Attempt: 1},
		{ID: "orders/0/1", Value: []byte(`{"sku":"a"}`), Attempt: 3},
		{ID: "orders/0/2", Value: []byte(`<order/>`), Attempt: 1},
		{ID: "orders/0/3", Value: nil, Attempt: 1},
	} {
		err := d.Deliver(context.Background(), m)
		if err == nil {
			fmt.Printf("%s attempt %d: done\n", m.ID, m.Attempt)
			continue
		}
		v := delivery.Classify(err, delivery.DefaultStatuses)
		fmt.Printf("%s attempt %d: %s: %s\n", m.ID, m.Attempt, v.Class, v.Message)
	}
	// Output:
	// orders/0/1 attempt 1: transient: stock service unavailable
	// orders/0/1 attempt 3: done
	// orders/0/2 attempt 1: permanent: record orders/0/2: not an order
	// orders/0/3 attempt 1: done
}

// An application written in Go reads a delivery back with
// MessageFromRequest and answers with a status from the contract.
func ExampleMessageFromRequest() {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, err := delivery.MessageFromRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest) // permanent: to the DLQ
			return
		}
		fmt.Printf("%s key %q value %q headers %q attempt %d\n", m.ID, m.Key, m.Value, m.Headers, m.Attempt)
		if m.Value == nil {
			w.WriteHeader(http.StatusUnprocessableEntity) // permanent
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer app.Close()

	h, err := delivery.NewHTTP(delivery.HTTPConfig{URL: app.URL})
	if err != nil {
		panic(err)
	}
	defer h.Close()

	m := &delivery.Message{ID: "orders/0/1", Topic: "orders", Offset: 1, Key: []byte("k"), Value: []byte("v"), Attempt: 1}
	fmt.Println(h.Deliver(context.Background(), m))
	m.Value = nil // a tombstone
	err = h.Deliver(context.Background(), m)
	fmt.Println(err, delivery.Classify(err, delivery.DefaultStatuses).Class)
	// Output:
	// orders/0/1 key "k" value "v" headers [] attempt 1
	// <nil>
	// orders/0/1 key "k" value "" headers [] attempt 1
	// status 422 permanent
}
