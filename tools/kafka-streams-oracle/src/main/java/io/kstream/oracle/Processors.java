package io.kstream.oracle;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.kstream.KeyValueMapper;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.state.WindowStoreIterator;

/**
 * The user processors a spec's "process" node names (library.py's PROCESSORS holds their
 * Python twins, name for name): what a Kafka user writes with the Processor API. Keys are
 * Strings; a record with a null key is skipped by the stateful ones, as Kafka's stores refuse
 * null keys.
 */
final class Processors {
    private Processors() {}

    static ProcessorSupplier<Object, Object, Object, Object> supplier(
            String name, String store, long interval) {
        switch (name) {
            case "count": return () -> new Count(store);
            case "buffer_stream_time":
                return () -> new Buffer(store, interval, PunctuationType.STREAM_TIME);
            case "buffer_wall_clock":
                return () -> new Buffer(store, interval, PunctuationType.WALL_CLOCK_TIME);
            case "add_header": return AddHeader::new;
            case "headers_text": return HeadersText::new;
            default: throw new IllegalArgumentException("no library processor " + name);
        }
    }

    /** Counts records per key in a KV store and forwards the running count. */
    static final class Count implements Processor<Object, Object, Object, Object> {
        private final String storeName;
        private ProcessorContext<Object, Object> context;
        private KeyValueStore<Object, Object> store;

        Count(String storeName) {
            this.storeName = storeName;
        }

        @Override
        public void init(ProcessorContext<Object, Object> context) {
            this.context = context;
            this.store = context.getStateStore(storeName);
        }

        @Override
        public void process(Record<Object, Object> record) {
            if (record.key() == null) return;
            Object old = store.get(record.key());
            long count = (old == null ? 0L : (Long) old) + 1;
            store.put(record.key(), count);
            context.forward(record.withValue(count));
        }
    }

    /**
     * Keeps each key's latest value (a null value deletes it) and, on each punctuation,
     * forwards the buffered records in key order, stamped with the punctuation's time, and
     * empties the buffer.
     */
    static final class Buffer implements Processor<Object, Object, Object, Object> {
        private final String storeName;
        private final long interval;
        private final PunctuationType type;
        private ProcessorContext<Object, Object> context;
        private KeyValueStore<Object, Object> store;

        Buffer(String storeName, long interval, PunctuationType type) {
            this.storeName = storeName;
            this.interval = interval;
            this.type = type;
        }

        @Override
        public void init(ProcessorContext<Object, Object> context) {
            this.context = context;
            this.store = context.getStateStore(storeName);
            context.schedule(Duration.ofMillis(interval), type, this::emit);
        }

        @Override
        public void process(Record<Object, Object> record) {
            if (record.key() == null) return;
            store.put(record.key(), record.value());
        }

        private void emit(long time) {
            List<KeyValue<Object, Object>> buffered = new ArrayList<>();
            try (KeyValueIterator<Object, Object> it = store.all()) {
                it.forEachRemaining(buffered::add);
            }
            buffered.sort((a, b) -> ((String) a.key).compareTo((String) b.key));
            for (KeyValue<Object, Object> kv : buffered) {
                store.delete(kv.key);
                context.forward(new Record<>(kv.key, kv.value, time));
            }
        }
    }

    /**
     * The Kafka user's deduplication (the pattern of Kafka's EventDeduplication example): a
     * window store keyed by the record's id remembers when each id was first seen; a record
     * whose id was first seen at most `within` before the task's stream time is dropped, any
     * other is forwarded and its id remembered (a null id passes and is not remembered). This
     * is what kstream's `KStream.deduplicate(id_fn, within)` does, which Kafka Streams' DSL
     * has no operator for.
     */
    static final class Deduplicate implements FixedKeyProcessor<Object, Object, Object> {
        private final String storeName;
        private final long within;
        private final KeyValueMapper<Object, Object, Object> idOf;
        private FixedKeyProcessorContext<Object, Object> context;
        private WindowStore<Object, Long> store;

        Deduplicate(String storeName, long within, KeyValueMapper<Object, Object, Object> idOf) {
            this.storeName = storeName;
            this.within = within;
            this.idOf = idOf;
        }

        @Override
        public void init(FixedKeyProcessorContext<Object, Object> context) {
            this.context = context;
            this.store = context.getStateStore(storeName);
        }

        @Override
        public void process(FixedKeyRecord<Object, Object> record) {
            Object id = idOf.apply(record.key(), record.value());
            if (id == null) {
                context.forward(record);
                return;
            }
            long now = Math.max(context.currentStreamTimeMs(), record.timestamp());
            boolean seen;
            try (WindowStoreIterator<Long> it = store.fetch(id, now - within, now)) {
                seen = it.hasNext();
            }
            if (seen) return;
            store.put(id, record.timestamp(), record.timestamp());
            context.forward(record);
        }
    }

    /** Forwards each record with a header "n" added: how many headers the record had. */
    static final class AddHeader implements Processor<Object, Object, Object, Object> {
        private ProcessorContext<Object, Object> context;

        @Override
        public void init(ProcessorContext<Object, Object> context) {
            this.context = context;
        }

        @Override
        public void process(Record<Object, Object> record) {
            RecordHeaders headers = new RecordHeaders(record.headers().toArray());
            int n = headers.toArray().length;
            headers.add("n", String.valueOf(n).getBytes(StandardCharsets.ISO_8859_1));
            context.forward(record.withHeaders(headers));
        }
    }

    /** Replaces each value with the text of the record's headers: "k=v,k=v" ("" for none). */
    static final class HeadersText implements Processor<Object, Object, Object, Object> {
        private ProcessorContext<Object, Object> context;

        @Override
        public void init(ProcessorContext<Object, Object> context) {
            this.context = context;
        }

        @Override
        public void process(Record<Object, Object> record) {
            StringBuilder text = new StringBuilder();
            for (Header h : record.headers()) {
                if (text.length() > 0) text.append(',');
                text.append(h.key()).append('=').append(h.value() == null
                    ? "null" : new String(h.value(), StandardCharsets.ISO_8859_1));
            }
            context.forward(record.withValue(text.toString()));
        }
    }
}
