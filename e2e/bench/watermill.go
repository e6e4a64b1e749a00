package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
)

// (c) Watermill: a Router on watermill-kafka (IBM/sarama underneath) with
// the Retry middleware (the kretry tier delays as its backoff: 100ms,
// 200ms, 400ms, no randomisation) and the PoisonQueue middleware. A
// permanent failure goes to the poison queue at once (PoisonQueueWithFilter
// inside Retry), an exhausted transient one after its last retry
// (PoisonQueue outside Retry). Retry's ShouldRetry hook is not used: in
// watermill v1.5.1 it advances the backoff once more per retry, which would
// double every delay.
//
// The sarama config is watermill-kafka's default with two changes:
// Offsets.Initial = OffsetOldest (the backlog is written before the router
// subscribes) and Consumer.MaxWaitTime = the bench's fetch wait (50ms,
// like the franz-go peers; sarama's default is 500ms).
func startWatermill(ctx context.Context, e *env) (func(), error) {
	logger := watermill.NopLogger{}
	sub, pub, err := watermillClients(e, logger)
	if err != nil {
		return nil, err
	}
	r, err := watermillRouter(e, pub, logger)
	if err != nil {
		_ = sub.Close()
		_ = pub.Close()
		return nil, err
	}
	r.AddConsumerHandler("bench", e.topic, sub, func(msg *message.Message) error {
		return e.a.handle(msg.Context(), msg.Payload).err()
	})
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case err := <-done:
		return nil, fmt.Errorf("watermill router: %w", err)
	case <-time.After(30 * time.Second):
		return nil, errors.New("watermill router did not start within 30s")
	}
	return func() {
		_ = r.Close()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
		}
		_ = sub.Close()
		_ = pub.Close()
	}, nil
}

// watermillClients are the router's subscriber (the sarama config above)
// and the publisher its poison queue writes with.
func watermillClients(e *env, logger watermill.LoggerAdapter) (*kafka.Subscriber, *kafka.Publisher, error) {
	scfg := kafka.DefaultSaramaSubscriberConfig()
	scfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	scfg.Consumer.MaxWaitTime = e.fetchWait
	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               e.addrs,
		Unmarshaler:           kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: scfg,
		ConsumerGroup:         e.group,
	}, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("watermill subscriber: %w", err)
	}
	pub, err := kafka.NewPublisher(kafka.PublisherConfig{
		Brokers:   e.addrs,
		Marshaler: kafka.DefaultMarshaler{},
	}, logger)
	if err != nil {
		_ = sub.Close()
		return nil, nil, fmt.Errorf("watermill publisher: %w", err)
	}
	return sub, pub, nil
}

// watermillRouter is a router with the poison queue and retry middleware
// described above.
func watermillRouter(e *env, pub *kafka.Publisher, logger watermill.LoggerAdapter) (*message.Router, error) {
	poison := e.topic + ".poison"
	poisonAll, err := middleware.PoisonQueue(pub, poison)
	if err != nil {
		return nil, err
	}
	poisonPermanent, err := middleware.PoisonQueueWithFilter(pub, poison, func(err error) bool {
		return errors.Is(err, errPermanent)
	})
	if err != nil {
		return nil, err
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return nil, err
	}
	retry := middleware.Retry{
		MaxRetries:      len(e.tiers),
		InitialInterval: e.tiers[0],
		MaxInterval:     e.tiers[len(e.tiers)-1],
		Multiplier:      2,
	}
	r.AddMiddleware(poisonAll, retry.Middleware, poisonPermanent)
	return r, nil
}
