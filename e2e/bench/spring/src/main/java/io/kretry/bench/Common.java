package io.kretry.bench;

import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.kafka.annotation.KafkaListener;
import org.springframework.kafka.core.ConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaConsumerFactory;
import org.springframework.kafka.core.DefaultKafkaProducerFactory;
import org.springframework.kafka.core.KafkaAdmin;
import org.springframework.kafka.core.KafkaTemplate;
import org.springframework.kafka.core.ProducerFactory;

/**
 * The beans both peers share: admin (creates the DLT and retry topics),
 * byte-array consumer and producer factories at the client defaults (plus
 * earliest offset reset, because the backlog is written before the peer
 * starts, and the bench's fetch max wait, as every peer gets), the template
 * the dead-letter and retry publishing uses, and the listener.
 */
@Configuration
class Common {
    @Bean
    KafkaAdmin admin(Settings s) {
        return new KafkaAdmin(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, s.brokers()));
    }

    @Bean
    ConsumerFactory<byte[], byte[]> consumerFactory(Settings s) {
        return new DefaultKafkaConsumerFactory<>(Map.of(
                ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, s.brokers(),
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, s.fetchMaxWaitMs(),
                ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class,
                ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class));
    }

    @Bean
    ProducerFactory<byte[], byte[]> producerFactory(Settings s) {
        return new DefaultKafkaProducerFactory<>(Map.of(
                ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, s.brokers(),
                ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class,
                ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class));
    }

    @Bean
    KafkaTemplate<byte[], byte[]> kafkaTemplate(ProducerFactory<byte[], byte[]> pf) {
        return new KafkaTemplate<>(pf);
    }

    @Bean
    Listener listener(App app) {
        return new Listener(app);
    }

    /** The @KafkaListener: one record at a time into the application. */
    static final class Listener {
        private final App app;

        Listener(App app) {
            this.app = app;
        }

        @KafkaListener(id = "bench", topics = "#{@settings.topic()}", groupId = "#{@settings.group()}")
        void onRecord(ConsumerRecord<byte[], byte[]> r) throws InterruptedException {
            app.handle(r.value());
        }
    }
}
