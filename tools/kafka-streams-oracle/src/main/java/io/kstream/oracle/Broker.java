package io.kstream.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TopologyConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

/**
 * A spec run as a real KafkaStreams app on a broker: a case line that carries
 * "broker": {"bootstrap", "application_id", "timeout_ms"} is built by the same SpecBuilder and
 * run with exactly_once_v2 until the app has consumed all its input, then closed. Its outputs
 * stay in the spec's output topics for the caller to read; the answer says how long it ran.
 *
 * For input the caller writes while the app runs (timed input, e.g. task idling), "broker" may
 * also carry "max_task_idle_ms" (Kafka's max.task.idle.ms), "input_records" (the app runs until
 * its sources hold at least that many records and it has consumed them all) and "running_file"
 * (a path written when the app reaches RUNNING, so the caller knows when to start writing).
 */
final class Broker {
    private Broker() {}

    static Map<String, Object> run(JsonNode spec, String stateDir) throws Exception {
        JsonNode broker = spec.get("broker");
        String appId = broker.get("application_id").asText();
        String bootstrap = broker.get("bootstrap").asText();
        long timeoutMs = broker.path("timeout_ms").asLong(60_000);
        Properties props = Oracle.config(stateDir);
        // a real app's stores: Kafka's defaults (RocksDB), not the test driver's in-memory ones
        props.remove(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG);
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 250);
        if (broker.has("max_task_idle_ms")) {
            props.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, broker.get("max_task_idle_ms").asLong());
        }
        long inputRecords = broker.path("input_records").asLong(0);
        Path runningFile = broker.hasNonNull("running_file")
            ? Path.of(broker.get("running_file").asText()) : null;
        StreamsBuilder builder = new StreamsBuilder(new TopologyConfig(new StreamsConfig(props)));
        new SpecBuilder(builder).build(spec);
        // the topics the app's group consumes and commits: its sources (a global table's
        // topic is read without a group) and, found on the broker, its repartition topics
        Set<String> sources = new HashSet<>();
        for (JsonNode node : spec.get("nodes")) {
            String op = node.get("op").asText();
            if ("stream".equals(op) || "table".equals(op)) sources.add(node.get("topic").asText());
        }
        AtomicReference<Throwable> failure = new AtomicReference<>();
        long start = System.nanoTime();
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap));
             KafkaStreams streams = new KafkaStreams(builder.build(), props)) {
            streams.setUncaughtExceptionHandler(e -> {
                failure.set(e);
                return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
            });
            if (runningFile != null) {
                streams.setStateListener((now, before) -> {
                    if (now != KafkaStreams.State.RUNNING) return;
                    try {
                        Files.writeString(runningFile, appId);
                    } catch (IOException e) {
                        failure.compareAndSet(null, e);
                    }
                });
            }
            streams.start();
            long deadline = System.currentTimeMillis() + timeoutMs;
            while (!drained(admin, appId, sources, inputRecords)) {
                if (failure.get() != null) throw new IllegalStateException("app failed", failure.get());
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("app " + appId + " did not consume its input in "
                        + timeoutMs + " ms (state " + streams.state() + ")");
                }
                Thread.sleep(100);
            }
            streams.close(Duration.ofSeconds(30));
            streams.cleanUp();
        }
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("ran_ms", (System.nanoTime() - start) / 1_000_000);
        return answer;
    }

    /**
     * True when the group's committed offsets reach the end of every partition it consumes. A
     * repartition topic is written in transactions, so its end is one past the commit marker
     * that follows its last record: a committed offset one short of it has consumed every
     * record (once a source is committed, what it wrote to a repartition topic is too). The
     * sources must also hold at least `inputRecords` records (input still being written).
     */
    static boolean drained(Admin admin, String appId, Set<String> sources, long inputRecords)
            throws Exception {
        Set<String> topics = new HashSet<>(sources);
        for (String t : admin.listTopics().names().get()) {
            if (t.startsWith(appId + "-") && t.endsWith("-repartition")) topics.add(t);
        }
        Map<TopicPartition, OffsetAndMetadata> committed =
            admin.listConsumerGroupOffsets(appId).partitionsToOffsetAndMetadata().get();
        Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
        for (TopicDescription d : admin.describeTopics(topics).allTopicNames().get().values()) {
            for (TopicPartitionInfo p : d.partitions()) {
                latest.put(new TopicPartition(d.name(), p.partition()), OffsetSpec.latest());
            }
        }
        var ends = admin.listOffsets(latest).all().get();
        long inSources = 0;
        for (var e : ends.entrySet()) {
            if (sources.contains(e.getKey().topic())) inSources += e.getValue().offset();
        }
        if (inSources < inputRecords) return false;
        for (var e : ends.entrySet()) {
            long end = e.getValue().offset();
            OffsetAndMetadata c = committed.get(e.getKey());
            long at = c == null ? 0 : c.offset();
            long slack = sources.contains(e.getKey().topic()) || end == 0 ? 0 : 1;
            if (at < end - slack) return false;
        }
        return true;
    }
}
