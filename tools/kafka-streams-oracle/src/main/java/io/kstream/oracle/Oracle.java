package io.kstream.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.StringWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyConfig;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Kafka Streams as the oracle: reads one case per line of stdin, a JSON object
 * {"nodes": [...], "records": [[topic, key, value, timestamp, headers?] or [null, ms], ...]}
 * (a [null, ms] row advances the driver's wall clock), runs it in Kafka's
 * TopologyTestDriver and prints one JSON answer per line: {"outputs": {topic: [[key, value,
 * timestamp, headers], ...]}, "stores": {name: [...]}, "describe": text}, or {"error": text}.
 * One JVM serves a whole test session, so its start and warm-up are paid once.
 */
public final class Oracle {
    private static final ObjectMapper JSON = new ObjectMapper();

    private Oracle() {}

    public static void main(String[] args) throws Exception {
        // Kafka's logging and warnings go to stderr; stdout carries answers only
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        String stateDir = Files.createTempDirectory("kafka-streams-oracle").toString();
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Map<String, Object> answer;
            try {
                JsonNode spec = JSON.readTree(line);
                answer = spec.has("broker") ? Broker.run(spec, stateDir) : run(spec, stateDir);
            } catch (Throwable e) {
                StringWriter trace = new StringWriter();
                e.printStackTrace(new PrintWriter(trace));
                answer = Map.of("error", trace.toString());
            }
            out.println(JSON.writeValueAsString(answer));
            out.flush();
        }
    }

    static Properties config(String stateDir) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "oracle");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        // kstream forwards every update: no record cache on this side either
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG, OracleStoreSuppliers.class);
        // emit-final windows and left/outer stream-stream joins check for closed windows on
        // every record, as kstream does (Kafka throttles them to once a wall-clock second)
        props.put(StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION, 0L);
        props.put(
            StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX,
            0L);
        return props;
    }

    static Map<String, Object> run(JsonNode spec, String stateDir) {
        Properties props = config(stateDir);
        StreamsBuilder builder = new StreamsBuilder(new TopologyConfig(new StreamsConfig(props)));
        new SpecBuilder(builder).build(spec);
        Topology topology = builder.build();
        Map<String, Object> answer = new LinkedHashMap<>();
        answer.put("describe", topology.describe().toString());
        try (TopologyTestDriver driver =
                 new TopologyTestDriver(topology, props, Instant.ofEpochMilli(0))) {
            Map<String, TestInputTopic<Object, Object>> inputs = new HashMap<>();
            Map<String, TestOutputTopic<Object, Object>> outputs = new LinkedHashMap<>();
            List<JsonNode> stores = new ArrayList<>();
            for (JsonNode node : spec.get("nodes")) {
                String op = node.get("op").asText();
                Serde<Object> vs = SpecBuilder.serde(node.get("vt").asText());
                if (node.has("topic") && !"to".equals(op)) {
                    String topic = node.get("topic").asText();
                    inputs.put(topic, driver.createInputTopic(
                        topic, SpecBuilder.KEY.serializer(), vs.serializer()));
                } else if ("to".equals(op)) {
                    // a sink with a topic chooser lists every topic it may choose
                    for (JsonNode t : node.has("topics") ? node.get("topics") : List.of(node.get("topic"))) {
                        outputs.put(t.asText(), driver.createOutputTopic(
                            t.asText(), SpecBuilder.KEY.deserializer(), vs.deserializer()));
                    }
                }
                // a deduplicate node's store (ids) has no store_kind, a versioned table's
                // store no iterator: neither is an answer
                if (node.has("store") && node.has("store_kind") && !node.has("versioned")) {
                    stores.add(node);
                }
                if (node.has("materialized")) stores.add(resultStore(node));
            }
            int[] at = {-1};  // the row being piped
            try {
                pipe(spec, driver, inputs, at);
            } catch (RuntimeException e) {
                // a failure a case may expect (a suppress buffer that shuts down when full)
                // is answered by its kind, with what was output before it
                String kind = expectedFailure(e);
                if (kind == null) throw e;
                answer.put("error", kind);
                answer.put("failed_at", at[0]);
            }
            Map<String, Object> produced = new LinkedHashMap<>();
            for (Map.Entry<String, TestOutputTopic<Object, Object>> e : outputs.entrySet()) {
                List<Object> records = new ArrayList<>();
                for (TestRecord<Object, Object> rec : e.getValue().readRecordsToList()) {
                    records.add(Arrays.asList(
                        rec.key(), rec.value(), rec.timestamp(), headers(rec)));
                }
                produced.put(e.getKey(), records);
            }
            answer.put("outputs", produced);
            Map<String, Object> contents = new LinkedHashMap<>();
            for (JsonNode node : stores) {
                contents.put(node.get("store").asText(), store(driver, node));
            }
            answer.put("stores", contents);
        }
        return answer;
    }

    /** Pipes the case's records in order ([null, ms] rows advance the wall clock). */
    private static void pipe(
            JsonNode spec, TopologyTestDriver driver, Map<String, TestInputTopic<Object, Object>> inputs,
            int[] at) {
        for (JsonNode r : spec.get("records")) {
            at[0]++;
            if (r.get(0).isNull()) {  // [null, ms]: the wall clock moves ms forward
                driver.advanceWallClockTime(Duration.ofMillis(r.get(1).asLong()));
                continue;
            }
            String topic = r.get(0).asText();
            String vt = typeOf(spec, topic);
            inputs.get(topic).pipeInput(new TestRecord<>(
                r.get(1).isNull() ? null : r.get(1).asText(),
                value(r.get(2), vt),
                inputHeaders(r.get(4)),
                r.get(3).asLong()));
        }
    }

    /** The kind of an expected failure ("buffer_full"), or null for any other. */
    static String expectedFailure(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String m = t.getMessage();
            if (m != null && m.contains("buffer exceeded its max capacity")) return "buffer_full";
        }
        return null;
    }

    /** A node's result store ("materialized") as a node of the answer's stores. */
    private static JsonNode resultStore(JsonNode node) {
        return JSON.createObjectNode()
            .put("store", node.get("materialized").asText())
            .put("store_kind", "kv");
    }

    private static String typeOf(JsonNode spec, String topic) {
        for (JsonNode node : spec.get("nodes")) {
            if (topic.equals(node.path("topic").asText()) && !"to".equals(node.get("op").asText())) {
                return node.get("vt").asText();
            }
        }
        throw new IllegalArgumentException("no source reads " + topic);
    }

    private static Object value(JsonNode v, String vt) {
        if (v.isNull()) return null;
        return "long".equals(vt) ? (Object) v.asLong() : v.asText();
    }

    /** A row's headers, [[key, value or null], ...] (values as ISO-8859-1 text), or none. */
    private static Headers inputHeaders(JsonNode rows) {
        RecordHeaders headers = new RecordHeaders();
        if (rows == null || rows.isNull()) return headers;
        for (JsonNode h : rows) {
            headers.add(h.get(0).asText(), h.get(1).isNull()
                ? null : h.get(1).asText().getBytes(StandardCharsets.ISO_8859_1));
        }
        return headers;
    }

    private static List<Object> headers(TestRecord<Object, Object> rec) {
        List<Object> out = new ArrayList<>();
        for (Header h : rec.headers()) {
            out.add(Arrays.asList(h.key(), h.value() == null ? null
                : new String(h.value(), StandardCharsets.ISO_8859_1)));
        }
        return out;
    }

    /** A store's contents: [key, value] rows, or [key, start, end, value] for windows. */
    private static List<Object> store(TopologyTestDriver driver, JsonNode node) {
        String name = node.get("store").asText();
        List<Object> rows = new ArrayList<>();
        switch (node.get("store_kind").asText()) {
            case "kv":
                try (KeyValueIterator<Object, Object> it =
                         driver.getKeyValueStore(name).all()) {
                    it.forEachRemaining(kv -> rows.add(Arrays.asList(kv.key, kv.value)));
                }
                return rows;
            case "window":
                try (KeyValueIterator<Windowed<Object>, Object> it =
                         driver.getWindowStore(name).all()) {
                    it.forEachRemaining(kv -> rows.add(windowRow(kv)));
                }
                return rows;
            default:
                try (KeyValueIterator<Windowed<Object>, Object> it =
                         driver.getSessionStore(name).findSessions(null, null, 0, Long.MAX_VALUE)) {
                    it.forEachRemaining(kv -> rows.add(windowRow(kv)));
                }
                return rows;
        }
    }

    private static List<Object> windowRow(KeyValue<Windowed<Object>, Object> kv) {
        return Arrays.asList(
            kv.key.key(), kv.key.window().start(), kv.key.window().end(), kv.value);
    }
}
