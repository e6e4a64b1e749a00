package io.kretry.bench;

import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.EnableKafkaRetryTopic;
import org.springframework.kafka.config.ConcurrentKafkaListenerContainerFactory;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.retrytopic.RetryTopicConfiguration;
import org.springframework.kafka.retrytopic.RetryTopicConfigurationBuilder;
import org.springframework.scheduling.TaskScheduler;
import org.springframework.scheduling.concurrent.ThreadPoolTaskScheduler;

/**
 * Spring Kafka's non-blocking retries, configured programmatically (the
 * RetryTopicConfiguration bean equivalent of @RetryableTopic): a transient
 * failure is published to &lt;topic&gt;-retry-0, -retry-1, -retry-2 (the
 * bench's delays, 100/200/400 ms: exponential, multiplier 2), whose
 * containers pause the partition until the record is due; a permanent
 * failure (notRetryOn) or a fourth failure goes to &lt;topic&gt;-dlt. The
 * topics are created with the source's partition count. One consumer
 * thread per source partition (concurrency = partitions), as for the retry
 * topics' containers. No per-key order across retries: later records of a
 * failing key are not held back.
 */
@Configuration
@EnableKafkaRetryTopic
class RetryTopicPeer {
    /** The retry topics' back-off manager needs one (Spring Boot would supply it). */
    @Bean
    TaskScheduler taskScheduler() {
        var s = new ThreadPoolTaskScheduler();
        s.setThreadNamePrefix("retry-topic-");
        return s;
    }

    @Bean
    ConcurrentKafkaListenerContainerFactory<byte[], byte[]> kafkaListenerContainerFactory(
            ConsumerFactory<byte[], byte[]> cf, Settings s) {
        var f = new ConcurrentKafkaListenerContainerFactory<byte[], byte[]>();
        f.setConsumerFactory(cf);
        f.setConcurrency(s.partitions());
        return f;
    }

    @Bean
    RetryTopicConfiguration retryTopics(KafkaTemplate<byte[], byte[]> template, Settings s) {
        return RetryTopicConfigurationBuilder.newInstance()
                .exponentialBackoff(s.firstBackoff(), 2.0, s.lastBackoff())
                .maxAttempts(s.retries() + 1)
                .notRetryOn(App.PermanentException.class)
                .autoCreateTopicsWith(s.partitions(), (short) 1)
                .suffixTopicsWithIndexValues()
                .includeTopic(s.topic())
                .create(template);
    }
}
