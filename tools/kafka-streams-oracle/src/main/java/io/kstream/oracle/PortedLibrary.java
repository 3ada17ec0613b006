package io.kstream.oracle;

import java.util.Map;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.streams.kstream.ValueTransformerWithKey;
import org.apache.kafka.streams.kstream.ValueTransformerWithKeySupplier;
import org.apache.kafka.streams.processor.ProcessorContext;
import org.apache.kafka.streams.processor.RecordContext;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The library's functions for the operators of ported applications (tests/oracle/library.py
 * holds their Python twins under the same names): timestamp extractors of a source, topic
 * choosers of a sink, value transformers of KTable.transformValues, and foreign-key
 * extractors of a foreign-key join.
 */
final class PortedLibrary {
    private PortedLibrary() {}

    /** A sink's topic chooser: the index of the topic (in the node's "topics") a record goes to. */
    interface Chooser {
        int choose(Object key, Object value, RecordContext context);
    }

    static final Map<String, Chooser> TOPIC_CHOOSERS = Map.of(
        "key_is_a", (k, v, c) -> "a".equals(k) ? 0 : 1,
        "value_null", (k, v, c) -> v == null ? 1 : 0,
        "odd_time", (k, v, c) -> (int) Math.floorMod(c.timestamp(), 2L));

    /** A timestamp extractor by name: the record's own time unless the name says otherwise. */
    static TimestampExtractor extractor(String name) {
        switch (name) {
            // a long value is the time (its record's own time when null)
            case "value_time":
                return (ConsumerRecord<Object, Object> r, long partitionTime) ->
                    r.value() == null ? r.timestamp() : (Long) r.value();
            // a null value gets -1: the record is dropped
            case "negative_for_null":
                return (ConsumerRecord<Object, Object> r, long partitionTime) ->
                    r.value() == null ? -1L : r.timestamp();
            // a null value gets the partition's time so far (-1 before the first: dropped)
            case "partition_time_for_null":
                return (ConsumerRecord<Object, Object> r, long partitionTime) ->
                    r.value() == null ? partitionTime : r.timestamp();
            default:
                throw new IllegalArgumentException("no timestamp extractor " + name);
        }
    }

    static final Map<String, Function<Object, Object>> FK_EXTRACTORS = Map.of(
        "value_head", v -> Library.head(v),
        "null_for_x", v -> "x".equals(v) ? null : Library.head(v),
        "abc_of_long", v -> String.valueOf("abc".charAt((int) Math.floorMod((Long) v, 3L))));

    /** "key=value" for every update, deletes too (a delete becomes a value). */
    static final class KeyEqualsValue implements ValueTransformerWithKey<Object, Object, Object> {
        @Override public void init(ProcessorContext context) {}

        @Override public Object transform(Object key, Object value) {
            return Library.render(key) + "=" + Library.render(value);
        }

        @Override public void close() {}
    }

    /** The length of a text; a delete stays a delete. */
    static final class LengthOrNull implements ValueTransformerWithKey<Object, Object, Object> {
        @Override public void init(ProcessorContext context) {}

        @Override public Object transform(Object key, Object value) {
            return value == null ? null : (long) ((String) value).length();
        }

        @Override public void close() {}
    }

    /** "value#n", n counting the calls per key in the transformer's KV store. */
    static final class CountCalls implements ValueTransformerWithKey<Object, Object, Object> {
        private final String store;
        private KeyValueStore<Object, Object> calls;

        CountCalls(String store) {
            this.store = store;
        }

        @Override public void init(ProcessorContext context) {
            calls = context.getStateStore(store);
        }

        @Override public Object transform(Object key, Object value) {
            Object seen = calls.get(key);
            long n = (seen == null ? 0L : (Long) seen) + 1;
            calls.put(key, n);
            return Library.render(value) + "#" + n;
        }

        @Override public void close() {}
    }

    static ValueTransformerWithKeySupplier<Object, Object, Object> transformer(
            String name, String store) {
        switch (name) {
            case "key_equals_value": return KeyEqualsValue::new;
            case "length_or_null": return LengthOrNull::new;
            case "count_calls": return () -> new CountCalls(store);
            default: throw new IllegalArgumentException("no value transformer " + name);
        }
    }
}
