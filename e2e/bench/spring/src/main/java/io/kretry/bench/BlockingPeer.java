package io.kretry.bench;

import org.apache.kafka.clients.admin.NewTopic;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.EnableKafka;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.config.TopicBuilder;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.listener.DeadLetterPublishingRecoverer;
import org.springframework.kafka.listener.DefaultErrorHandler;
import org.springframework.kafka.support.ExponentialBackOffWithMaxRetries;

/**
 * Spring Kafka's blocking retries: the DefaultErrorHandler seeks back to a
 * failed record and retries it in place after 100, 200, 400 ms (the
 * bench's delays: ExponentialBackOffWithMaxRetries, multiplier 2), holding
 * up its partition meanwhile; a permanent failure (not retryable) or a
 * fourth failure is published to &lt;topic&gt;-dlt, same partition, by the
 * DeadLetterPublishingRecoverer, and the partition moves on. One consumer
 * thread per partition (concurrency = partitions).
 */
@Configuration
@EnableKafka
class BlockingPeer {
    @Bean
    NewTopic deadLetterTopic(Settings s) {
        return TopicBuilder.name(s.topic() + "-dlt").partitions(s.partitions()).replicas(1).build();
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<byte[], byte[]> kafkaListenerContainerFactory(
            ConsumerFactory<byte[], byte[]> cf, KafkaTemplate<byte[], byte[]> template, Settings s) {
        var backOff = new ExponentialBackOffWithMaxRetries(s.retries());
        backOff.setInitialInterval(s.firstBackoff());
        backOff.setMultiplier(2.0);
        backOff.setMaxInterval(s.lastBackoff());
        var handler = new DefaultErrorHandler(new DeadLetterPublishingRecoverer(template), backOff);
        handler.addNotRetryableExceptions(App.PermanentException.class);
        var f = new ConcurrentKafkaListenerContainerFactory<byte[], byte[]>();
        f.setConsumerFactory(cf);
        f.setConcurrency(s.partitions());
        f.setCommonErrorHandler(handler);
        return f;
    }
}
