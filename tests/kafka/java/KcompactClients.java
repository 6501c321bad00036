// Kafka's own Java clients for the tests that run a real broker (tests/kafka/clients.py compiles and runs this).
//
// One command per run, its spec as JSON on stdin, its results as JSON lines on stdout:
//   produce  {"bootstrap", "topic", "config": {producer settings}, "steps": [...]}, or several producers in one
//            run: "producers": {name: {settings}} and "producer": name in each step (steps interleave them);
//            a step is one of
//            {"send": [record, ...], "partition": P}  sends, then flushes (one batch per step where linger and
//                                                     batch.size allow); prints {"partition", "offset"} per record
//            {"begin": true} | {"commit": true} | {"abort": true}   a transaction (transactional.id set)
//            {"await_kill": true}  flushes, prints {"awaiting_kill": true} and sleeps: the test kills the JVM
//                                  with SIGKILL, so nothing (no abort, no close) reaches the broker
//            a record: {"key": str|null, "value": str|null, "headers": [[k, v|null], ...], "timestamp": ms|null}
//   consume  {"bootstrap", "topic", "partitions": [P, ...], "isolation_level", "timeout_ms"}: every record from
//            the log start to the end offset (the last stable offset under read_committed), one line each:
//            {"partition", "offset", "key", "value", "headers", "timestamp", "timestamp_type"}
//   admin    {"bootstrap", "create_topics": [{"name", "partitions", "replication_factor", "configs"}],
//            "brokers": N (waits until the cluster shows N brokers)}: prints {"brokers": N} and
//            {"created": name} per topic
// Keys, values and header values are UTF-8 strings (null stays null). Any error: the stack trace on stderr, exit 1.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KcompactClients {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        JsonNode spec = JSON.readTree(System.in);
        switch (args[0]) {
            case "produce" -> produce(spec);
            case "consume" -> consume(spec);
            case "admin" -> admin(spec);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
        System.out.flush();
    }

    private static void emit(ObjectNode line) throws Exception {
        System.out.println(JSON.writeValueAsString(line));
        System.out.flush();
    }

    private static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : node.asText().getBytes(StandardCharsets.UTF_8);
    }

    private static String text(byte[] data) {
        return data == null ? null : new String(data, StandardCharsets.UTF_8);
    }

    private static Properties settings(JsonNode spec) {
        Properties props = new Properties();
        props.put("bootstrap.servers", spec.get("bootstrap").asText());
        JsonNode config = spec.get("config");
        if (config != null) {
            for (Iterator<Map.Entry<String, JsonNode>> it = config.fields(); it.hasNext(); ) {
                Map.Entry<String, JsonNode> entry = it.next();
                props.put(entry.getKey(), entry.getValue().asText());
            }
        }
        return props;
    }

    private static KafkaProducer<byte[], byte[]> producer(
            Map<String, KafkaProducer<byte[], byte[]>> producers, JsonNode spec, String name) {
        KafkaProducer<byte[], byte[]> producer = producers.get(name);
        if (producer == null) {
            Properties props = settings(spec);
            if (spec.has("producers")) {
                spec.get("producers").get(name).fields().forEachRemaining(
                    e -> props.put(e.getKey(), e.getValue().asText()));
            }
            props.putIfAbsent("linger.ms", "60000");  // a step's records wait for its flush: one batch per step
            props.putIfAbsent("batch.size", "1048576");
            producer = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
            if (props.containsKey("transactional.id")) {
                producer.initTransactions();
            }
            producers.put(name, producer);
        }
        return producer;
    }

    private static void produce(JsonNode spec) throws Exception {
        String topic = spec.get("topic").asText();
        Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
        for (JsonNode step : spec.get("steps")) {
            KafkaProducer<byte[], byte[]> producer = producer(producers, spec, step.path("producer").asText("default"));
            if (step.has("send")) {
                Integer partition = step.has("partition") ? step.get("partition").asInt() : null;
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (JsonNode record : step.get("send")) {
                    List<Header> headers = new ArrayList<>();
                    if (record.has("headers")) {
                        for (JsonNode header : record.get("headers")) {
                            headers.add(new RecordHeader(header.get(0).asText(), bytes(header.get(1))));
                        }
                    }
                    Long timestamp = record.hasNonNull("timestamp") ? record.get("timestamp").asLong() : null;
                    sent.add(producer.send(new ProducerRecord<>(
                        topic, partition, timestamp, bytes(record.get("key")), bytes(record.get("value")), headers)));
                }
                producer.flush();
                for (Future<RecordMetadata> future : sent) {
                    RecordMetadata meta = future.get();
                    emit(JSON.createObjectNode().put("partition", meta.partition()).put("offset", meta.offset()));
                }
            } else if (step.has("begin")) {
                producer.beginTransaction();
            } else if (step.has("commit")) {
                producer.commitTransaction();
            } else if (step.has("abort")) {
                producer.abortTransaction();
            } else if (step.has("await_kill")) {
                producer.flush();
                emit(JSON.createObjectNode().put("awaiting_kill", true));
                Thread.sleep(Long.MAX_VALUE);
            } else {
                throw new IllegalArgumentException("unknown step " + step);
            }
        }
        for (KafkaProducer<byte[], byte[]> producer : producers.values()) {
            producer.close();
        }
    }

    private static void consume(JsonNode spec) throws Exception {
        Properties props = settings(spec);
        props.put("isolation.level", spec.get("isolation_level").asText());
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        String topic = spec.get("topic").asText();
        List<TopicPartition> partitions = new ArrayList<>();
        for (JsonNode partition : spec.get("partitions")) {
            partitions.add(new TopicPartition(topic, partition.asInt()));
        }
        long deadline = System.currentTimeMillis() + spec.path("timeout_ms").asLong(60000);
        try (KafkaConsumer<byte[], byte[]> consumer =
                 new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = new HashMap<>(consumer.endOffsets(partitions));
            while (!done(consumer, end)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("consumer did not reach the end offsets " + end);
                }
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
                    ArrayNode headers = JSON.createArrayNode();
                    for (Header header : record.headers()) {
                        headers.addArray().add(header.key()).add(text(header.value()));
                    }
                    ObjectNode line = JSON.createObjectNode()
                        .put("partition", record.partition())
                        .put("offset", record.offset())
                        .put("key", text(record.key()))
                        .put("value", text(record.value()))
                        .put("timestamp", record.timestamp())
                        .put("timestamp_type", record.timestampType().toString());
                    line.set("headers", headers);
                    emit(line);
                }
            }
            for (TopicPartition partition : partitions) {
                emit(JSON.createObjectNode().put("partition", partition.partition())
                    .put("end_offset", end.get(partition)).put("position", consumer.position(partition)));
            }
        }
    }

    private static boolean done(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> entry : end.entrySet()) {
            if (consumer.position(entry.getKey()) < entry.getValue()) {
                return false;
            }
        }
        return true;
    }

    private static void admin(JsonNode spec) throws Exception {
        long deadline = System.currentTimeMillis() + spec.path("timeout_ms").asLong(60000);
        try (Admin admin = Admin.create(settings(spec))) {
            if (spec.has("brokers")) {
                int want = spec.get("brokers").asInt();
                int seen = admin.describeCluster().nodes().get().size();
                while (seen < want) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("only " + seen + " of " + want + " brokers registered");
                    }
                    Thread.sleep(200);
                    seen = admin.describeCluster().nodes().get().size();
                }
                emit(JSON.createObjectNode().put("brokers", seen));
            }
            if (spec.has("create_topics")) {
                List<NewTopic> topics = new ArrayList<>();
                for (JsonNode topic : spec.get("create_topics")) {
                    Map<String, String> configs = new HashMap<>();
                    JsonNode given = topic.get("configs");
                    if (given != null) {
                        given.fields().forEachRemaining(e -> configs.put(e.getKey(), e.getValue().asText()));
                    }
                    topics.add(new NewTopic(topic.get("name").asText(), topic.path("partitions").asInt(1),
                        (short) topic.path("replication_factor").asInt(1)).configs(configs));
                }
                admin.createTopics(topics).all().get();
                for (NewTopic topic : topics) {
                    emit(JSON.createObjectNode().put("created", topic.name()));
                }
            }
        }
    }
}
