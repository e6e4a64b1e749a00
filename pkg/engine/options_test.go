package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
	"github.com/kretry/kretry/pkg/flow"
	"github.com/kretry/kretry/retrytopics"
)

// TestOptionsDefaults: zero Options get the YAML config's defaults, so a Go
// program that embeds the engine as the README shows keeps per-key order.
func TestOptionsDefaults(t *testing.T) {
	o := Options{Plan: retrytopics.Plan{Source: "orders"}, Group: "orders-kretry"}
	if err := o.setDefaults(); err != nil {
		t.Fatal(err)
	}
	if o.Ordering != flow.OrderingKey || o.ParkingTopic != "orders.parking" || o.OnDeadLetter != flow.OnDeadLetterRelease {
		t.Errorf("ordering %q, parking %q, on dead letter %q; want key, orders.parking, release", o.Ordering, o.ParkingTopic, o.OnDeadLetter)
	}
	if o.MaxInFlight != flow.DefaultMaxInFlight || o.DeliveryTimeout != flow.DefaultDeliveryTimeout ||
		o.FetchMaxWait != flow.DefaultFetchMaxWait || o.MaxParked != flow.DefaultMaxParked {
		t.Errorf("in flight %d, timeout %s, fetch wait %s, max parked %d", o.MaxInFlight, o.DeliveryTimeout, o.FetchMaxWait, o.MaxParked)
	}
	if o.Statuses != &delivery.DefaultStatuses || !strings.HasPrefix(o.TransactionalID, "kretry-") || !strings.HasSuffix(o.TransactionalID, "-orders-kretry") {
		t.Errorf("statuses %v, transactional id %q", o.Statuses, o.TransactionalID)
	}

	if host := flow.DefaultInstanceID(); o.InstanceID != host || o.TransactionalID != "kretry-"+host+"-orders-kretry" {
		t.Errorf("instance id %q, transactional id %q; want %q and kretry-%s-orders-kretry, as kretry run's defaults", o.InstanceID, o.TransactionalID, host, host)
	}

	none := Options{Plan: retrytopics.Plan{Source: "orders"}, Ordering: flow.OrderingNone}
	if err := none.setDefaults(); err != nil || none.ParkingTopic != "" {
		t.Errorf("ordering none: parking %q, err %v; want no parking topic", none.ParkingTopic, err)
	}
	for _, bad := range []Options{{Ordering: "keys"}, {OnDeadLetter: "drop"}} {
		err := bad.setDefaults()
		if err == nil || !strings.Contains(err.Error(), "use one of") {
			t.Errorf("%+v: err %v, want one naming the valid values", bad, err)
		}
	}
}

// TestEmbeddedIsNotABroker: a newcomer embedding the engine with the
// repository's config.yaml passed kafka.brokers [embedded] and got a DNS
// error for the host "embedded"; New now names the entry and what to do.
func TestEmbeddedIsNotABroker(t *testing.T) {
	_, err := New(context.Background(), Options{Brokers: []string{"127.0.0.1:9092", "embedded"}, Plan: retrytopics.Plan{Source: "orders"}, Group: "g",
		Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil })})
	want := `engine: Brokers[1] is "embedded", the broker kretry run starts in its own process: start one yourself (kfake.NewCluster`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("New with Brokers [127.0.0.1:9092 embedded]: %v, want an error containing %q", err, want)
	}
}

// TestNewNamesTheMissingOptions: New says which required option is unset
// (a newcomer leaving out one got the same list of all four each time).
func TestNewNamesTheMissingOptions(t *testing.T) {
	full := Options{Brokers: []string{"127.0.0.1:1"}, Plan: retrytopics.Plan{Source: "orders"}, Group: "orders-kretry",
		Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil })}
	for name, unset := range map[string]func(*Options){
		"Brokers":     func(o *Options) { o.Brokers = nil },
		"Plan.Source": func(o *Options) { o.Plan.Source = "" },
		"Group":       func(o *Options) { o.Group = "" },
		"Deliverer":   func(o *Options) { o.Deliverer = nil },
	} {
		o := full
		unset(&o)
		_, err := New(context.Background(), o)
		if want := "engine: " + name + " not set"; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("without %s: %v, want %q", name, err, want)
		}
	}
	_, err := New(context.Background(), Options{})
	if want := "engine: Brokers, Plan.Source, Group, Deliverer not set"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("zero Options: %v, want %q", err, want)
	}
}

// TestInstanceIDNamesTheTransactionalID: a program that names its instance
// gets the transactional id kretry run derives from kafka.instance_id, so
// two instances on one host that set only InstanceID do not fence each
// other's producer; with DynamicMembership there is no instance id and the
// transactional id keeps the host's name.
func TestInstanceIDNamesTheTransactionalID(t *testing.T) {
	o := Options{Plan: retrytopics.Plan{Source: "orders"}, Group: "orders-kretry", InstanceID: "pod-3"}
	if err := o.setDefaults(); err != nil || o.TransactionalID != "kretry-pod-3-orders-kretry" {
		t.Errorf("InstanceID pod-3: transactional id %q, err %v; want kretry-pod-3-orders-kretry", o.TransactionalID, err)
	}
	d := Options{Plan: retrytopics.Plan{Source: "orders"}, Group: "orders-kretry", DynamicMembership: true}
	if err := d.setDefaults(); err != nil || d.InstanceID != "" || d.TransactionalID != "kretry-"+flow.DefaultInstanceID()+"-orders-kretry" {
		t.Errorf("DynamicMembership: instance id %q, transactional id %q, err %v; want none and the host's", d.InstanceID, d.TransactionalID, err)
	}
}

// TestNewRefusesABadInstanceID: New names an InstanceID that Kafka would
// refuse as a group.instance.id (instead of a join error from the broker),
// and one set beside DynamicMembership.
func TestNewRefusesABadInstanceID(t *testing.T) {
	base := Options{Brokers: []string{"127.0.0.1:1"}, Plan: retrytopics.Plan{Source: "orders"}, Group: "orders-kretry",
		Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil })}
	for _, tc := range []struct {
		set  func(*Options)
		want string
	}{
		{func(o *Options) { o.InstanceID = "pod 3" }, `engine: InstanceID "pod 3" holds " ": use letters, digits`},
		{func(o *Options) { o.InstanceID = "pöd" }, `engine: InstanceID "pöd" holds "ö"`},
		{func(o *Options) { o.InstanceID = strings.Repeat("a", flow.MaxInstanceIDLen+1) }, "engine: InstanceID is 201 characters long: at most 200"},
		{func(o *Options) { o.InstanceID, o.DynamicMembership = "pod-3", true }, `engine: InstanceID "pod-3" and DynamicMembership are both set`},
	} {
		o := base
		tc.set(&o)
		_, err := New(context.Background(), o)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("InstanceID %.20q, DynamicMembership %v: %v, want an error starting %q", o.InstanceID, o.DynamicMembership, err, tc.want)
		}
	}
}

// TestNewWithNoBrokerNamesBrokers: New with brokers that never answer
// returned the client's dial error alone ("listing topics …: unable to
// dial …"), naming neither the option nor what to check (found by a
// newcomer).
func TestNewWithNoBrokerNamesBrokers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err := New(ctx, Options{Brokers: []string{"127.0.0.1:1"}, Plan: retrytopics.Plan{Source: "orders"}, Group: "orders-kretry",
		Deliverer: delivery.HandlerFunc(func(context.Context, *delivery.Message) error { return nil })})
	if want := "engine: the brokers [127.0.0.1:1] did not answer"; err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "check Brokers") {
		t.Errorf("New with no broker: %v, want an error starting %q that says to check Brokers", err, want)
	}
}
