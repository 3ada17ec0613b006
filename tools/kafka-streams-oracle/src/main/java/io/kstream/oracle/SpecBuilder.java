package io.kstream.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.BranchedKStream;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KGroupedTable;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Predicate;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.kstream.SessionWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.TableJoined;
import org.apache.kafka.streams.kstream.TimeWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueMapper;
import org.apache.kafka.streams.kstream.ValueMapperWithKey;
import org.apache.kafka.streams.processor.RecordContext;
import org.apache.kafka.streams.processor.TopicNameExtractor;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.Stores;

/**
 * Builds a spec's nodes with Kafka Streams' DSL, in the order given (every node's inputs come
 * before it). tests/oracle/spec.py builds the same spec with kstream's DSL; the two must stay
 * operator for operator alike. Values are typed by each node's "vt" ("string" or "long"), keys
 * are Strings; serdes are given explicitly everywhere, so no default serde is ever used.
 */
@SuppressWarnings({"unchecked", "rawtypes"})
final class SpecBuilder {
    static final Serde<Object> KEY = (Serde) Serdes.String();

    private final StreamsBuilder builder;
    private final Map<Integer, JsonNode> nodes = new HashMap<>();
    private final Map<Integer, Object> handles = new HashMap<>();

    SpecBuilder(StreamsBuilder builder) {
        this.builder = builder;
    }

    static Serde<Object> serde(String vt) {
        switch (vt) {
            case "string": return (Serde) Serdes.String();
            case "long": return (Serde) Serdes.Long();
            default: throw new IllegalArgumentException("unknown value type " + vt);
        }
    }

    void build(JsonNode spec) {
        for (JsonNode node : spec.get("nodes")) {
            int id = node.get("id").asInt();
            nodes.put(id, node);
            handles.put(id, add(node));
        }
    }

    private Object in(JsonNode node, int i) {
        return handles.get(node.get("in").get(i).asInt());
    }

    private String vtOf(JsonNode node, int i) {
        return nodes.get(node.get("in").get(i).asInt()).get("vt").asText();
    }

    static String text(JsonNode node, String field) {
        return node.get(field).asText();
    }

    static Duration ms(JsonNode node, String field) {
        return Duration.ofMillis(node.get(field).asLong());
    }

    private Materialized materialized(JsonNode node) {
        Materialized m = Materialized.as(text(node, "store"))
            .withKeySerde(KEY)
            .withValueSerde(serde(text(node, "vt")));
        return node.has("retention") ? m.withRetention(ms(node, "retention")) : m;
    }

    private Object add(JsonNode node) {
        String op = text(node, "op");
        Serde<Object> vs = serde(text(node, "vt"));
        switch (op) {
            case "stream":
                return builder.stream(text(node, "topic"), consumed(node, vs));
            case "table":
                return builder.table(text(node, "topic"), consumed(node, vs), tableStore(node));
            case "globalTable":
                return builder.globalTable(text(node, "topic"), consumed(node, vs), materialized(node));
            case "to":
                to(node, vs);
                return null;
            case "split":
                return split(node);
            case "branch":
                return ((List<KStream>) in(node, 0)).get(node.get("index").asInt());
            case "merge":
                return named(node) == null
                    ? ((KStream) in(node, 0)).merge((KStream) in(node, 1))
                    : ((KStream) in(node, 0)).merge((KStream) in(node, 1), named(node));
            case "repartition":
                return ((KStream) in(node, 0)).repartition(Repartitioned.with(KEY, vs));
            case "toTable":
                return ((KStream) in(node, 0)).toTable(tableStore(node));
            case "toStream":
                return toStream(node);
            case "groupByKey":
                return ((KStream) in(node, 0)).groupByKey(grouped(node, vs));
            case "groupBy":
                return groupBy(node, vs);
            case "windowedBy":
                return windowedBy(node);
            case "count":
            case "reduce":
            case "aggregate":
                return aggregation(node, op);
            case "join":
            case "leftJoin":
            case "outerJoin":
                return join(node, op);
            case "process":
                return process(node);
            case "deduplicate":
                return deduplicate(node);
            case "cogroup":
                return NewOperators.cogroup(node, in(node, 0), node.get("in").size() > 1 ? in(node, 1) : null);
            case "suppress":
                return NewOperators.suppress(node, (KTable) in(node, 0));
            case "transformValues":
                return transformValues(node, vs);
            default:
                return stateless(node, op);
        }
    }

    private Object stateless(JsonNode node, String op) {
        Object input = in(node, 0);
        String fn = text(node, "fn");
        Named n = named(node);
        if (input instanceof KTable) return tableOp(node, op, (KTable) input, fn, n);
        KStream s = (KStream) input;
        if (node.path("with_key").asBoolean()) {  // a ValueMapperWithKey
            if ("mapValues".equals(op)) {
                ValueMapperWithKey m = Library.get(Library.VALUE_MAPPERS_WITH_KEY, fn);
                return n == null ? s.mapValues(m) : s.mapValues(m, n);
            }
            ValueMapperWithKey m = Library.get(Library.FLAT_VALUE_MAPPERS_WITH_KEY, fn);
            return n == null ? s.flatMapValues(m) : s.flatMapValues(m, n);
        }
        switch (op) {
            case "filter": {
                Predicate p = Library.get(Library.PREDICATES, fn);
                return n == null ? s.filter(p) : s.filter(p, n);
            }
            case "filterNot": {
                Predicate p = Library.get(Library.PREDICATES, fn);
                return n == null ? s.filterNot(p) : s.filterNot(p, n);
            }
            case "mapValues": {
                ValueMapper m = Library.get(Library.VALUE_MAPPERS, fn);
                return n == null ? s.mapValues(m) : s.mapValues(m, n);
            }
            case "map": {
                var m = Library.get(Library.KV_MAPPERS, fn);
                return n == null ? s.map(m) : s.map(m, n);
            }
            case "selectKey": {
                var m = Library.get(Library.KEY_SELECTORS, fn);
                return n == null ? s.selectKey(m) : s.selectKey(m, n);
            }
            case "flatMap": {
                var m = Library.get(Library.FLAT_MAPPERS, fn);
                return n == null ? s.flatMap(m) : s.flatMap(m, n);
            }
            case "flatMapValues": {
                ValueMapper m = Library.get(Library.FLAT_VALUE_MAPPERS, fn);
                return n == null ? s.flatMapValues(m) : s.flatMapValues(m, n);
            }
            case "processValues": {
                ValueMapper m = Library.get(Library.VALUE_MAPPERS, fn);
                return n == null
                    ? s.processValues(() -> new MapValuesProcessor(m))
                    : s.processValues(() -> new MapValuesProcessor(m), n);
            }
            default: throw new IllegalArgumentException("no stream operator " + op);
        }
    }

    /** A table's filter, filterNot or mapValues, named and materialized as the node says. */
    private Object tableOp(JsonNode node, String op, KTable t, String fn, Named n) {
        Materialized m = node.has("materialized") ? resultStore(node) : null;
        if (node.path("with_key").asBoolean() || "mapValues".equals(op)) {
            if (node.path("with_key").asBoolean()) {
                ValueMapperWithKey f = Library.get(Library.VALUE_MAPPERS_WITH_KEY, fn);
                if (m == null) return n == null ? t.mapValues(f) : t.mapValues(f, n);
                return n == null ? t.mapValues(f, m) : t.mapValues(f, n, m);
            }
            ValueMapper f = Library.get(Library.VALUE_MAPPERS, fn);
            if (m == null) return n == null ? t.mapValues(f) : t.mapValues(f, n);
            return n == null ? t.mapValues(f, m) : t.mapValues(f, n, m);
        }
        Predicate p = Library.get(Library.PREDICATES, fn);
        switch (op) {
            case "filter":
                if (m == null) return n == null ? t.filter(p) : t.filter(p, n);
                return n == null ? t.filter(p, m) : t.filter(p, n, m);
            case "filterNot":
                if (m == null) return n == null ? t.filterNot(p) : t.filterNot(p, n);
                return n == null ? t.filterNot(p, m) : t.filterNot(p, n, m);
            default: throw new IllegalArgumentException("no table operator " + op);
        }
    }

    /** A node's Named (Named.as), or null when it has no "name". */
    static Named named(JsonNode node) {
        return node.hasNonNull("name") ? Named.as(text(node, "name")) : null;
    }

    /** A groupBy's Grouped: its serdes, and its "grouped" name (Grouped.as) if any. */
    private static Grouped grouped(JsonNode node, Serde<Object> vs) {
        return node.hasNonNull("grouped")
            ? Grouped.with(text(node, "grouped"), KEY, vs) : Grouped.with(KEY, vs);
    }

    /** A source's Consumed: its name and its timestamp extractor, as the node says. */
    private static Consumed consumed(JsonNode node, Serde<Object> vs) {
        Consumed c = Consumed.with(KEY, vs);
        if (node.has("extractor")) {
            c = c.withTimestampExtractor(PortedLibrary.extractor(text(node, "extractor")));
        }
        return node.hasNonNull("name") ? c.withName(text(node, "name")) : c;
    }

    /**
     * A table source's (or toTable's) store: a versioned one ("versioned": its history
     * retention), a named one, or, without "store", an unnamed one (serdes only): Kafka then
     * materializes the table only when an operator needs it (a join's value getter, old values).
     */
    private Materialized tableStore(JsonNode node) {
        if (!node.has("store")) return Materialized.with(KEY, serde(text(node, "vt")));
        if (!node.has("versioned")) return materialized(node);
        return Materialized.as(Stores.persistentVersionedKeyValueStore(
                text(node, "store"), ms(node, "versioned")))
            .withKeySerde(KEY)
            .withValueSerde(serde(text(node, "vt")));
    }

    /** The store a table operator's result is kept in ("materialized": its name). */
    static Materialized resultStore(JsonNode node) {
        return Materialized.as(text(node, "materialized"))
            .withKeySerde(KEY)
            .withValueSerde(serde(text(node, "vt")));
    }

    /** to(topic) or, with a "chooser", to(TopicNameExtractor) over the node's "topics". */
    private void to(JsonNode node, Serde<Object> vs) {
        KStream s = (KStream) in(node, 0);
        Produced p = Produced.with(KEY, vs);
        if (node.hasNonNull("name")) p = p.withName(text(node, "name"));
        if (!node.has("chooser")) {
            s.to(text(node, "topic"), p);
            return;
        }
        PortedLibrary.Chooser chooser =
            Library.get(PortedLibrary.TOPIC_CHOOSERS, text(node, "chooser"));
        List<String> topics = new ArrayList<>();
        node.get("topics").forEach(t -> topics.add(t.asText()));
        String name = text(node, "chooser");
        TopicNameExtractor<Object, Object> extractor = new TopicNameExtractor<>() {
            @Override
            public String extract(Object k, Object v, RecordContext context) {
                return topics.get(chooser.choose(k, v, context));
            }

            @Override
            public String toString() {  // describe() prints it: the same text as spec.py's
                return "chooser " + name;
            }
        };
        s.to(extractor, p);
    }

    /** KTable.transformValues with a library transformer, its store and result store. */
    private KTable transformValues(JsonNode node, Serde<Object> vs) {
        KTable t = (KTable) in(node, 0);
        String store = node.has("store") ? text(node, "store") : null;
        var supplier = PortedLibrary.transformer(text(node, "transformer"), store);
        String[] stores = store == null ? new String[0] : new String[] {store};
        if (store != null) {
            builder.addStateStore(Stores.keyValueStoreBuilder(
                Stores.inMemoryKeyValueStore(store), KEY, Serdes.Long()));
        }
        Named n = named(node);
        if (!node.has("materialized")) {
            return n == null ? t.transformValues(supplier, stores)
                : t.transformValues(supplier, n, stores);
        }
        Materialized m = resultStore(node);
        return n == null ? t.transformValues(supplier, m, stores)
            : t.transformValues(supplier, m, n, stores);
    }

    /**
     * A user processor of the library (Processors.java), with its KV store when the node
     * names one: the store's values are of the node's type.
     */
    private KStream process(JsonNode node) {
        KStream s = (KStream) in(node, 0);
        String store = node.has("store") ? text(node, "store") : null;
        var supplier = Processors.supplier(
            text(node, "processor"), store, node.path("interval").asLong(0));
        if (store == null) return s.process(supplier);
        builder.addStateStore(Stores.keyValueStoreBuilder(
            Stores.inMemoryKeyValueStore(store), KEY, serde(text(node, "vt"))));
        return s.process(supplier, store);
    }

    /**
     * kstream's `deduplicate`, as a Kafka user writes it: a FixedKeyProcessor with a window
     * store of first-seen times keyed by the id (Processors.Deduplicate); the store's
     * retention and window size are `within`, as in Kafka's EventDeduplication example.
     */
    private KStream deduplicate(JsonNode node) {
        String store = text(node, "store");
        long within = node.get("within").asLong();
        var idOf = Library.get(Library.KEY_SELECTORS, text(node, "fn"));
        builder.addStateStore(Stores.windowStoreBuilder(
            Stores.persistentWindowStore(
                store, Duration.ofMillis(within), Duration.ofMillis(within), false),
            KEY, Serdes.Long()));
        return ((KStream) in(node, 0)).processValues(
            () -> new Processors.Deduplicate(store, within, idOf), store);
    }

    /** split: the branches' streams in the spec's order (spec.py's `_split`). */
    private List<KStream> split(JsonNode node) {
        boolean named = !node.has("named") || node.get("named").asBoolean();
        String prefix = named ? "split-" + node.get("id").asInt() + "-" : "";
        KStream input = (KStream) in(node, 0);
        BranchedKStream splitter = named ? input.split(Named.as(prefix)) : input.split();
        List<JsonNode> specs = new ArrayList<>();
        for (JsonNode br : node.get("branches")) {
            Branched b = branched(br);
            Predicate p = Library.get(Library.PREDICATES, text(br, "fn"));
            splitter = b == null ? splitter.branch(p) : splitter.branch(p, b);
            specs.add(br);
        }
        JsonNode d = node.get("default");
        Map<String, KStream> out;
        if (d != null && !d.isNull()) {
            Branched b = branched(d);
            out = b == null ? splitter.defaultBranch() : splitter.defaultBranch(b);
            specs.add(d);
        } else {
            out = splitter.noDefaultBranch();
        }
        // an unnamed split's generated name, read off a key (as library.py's branch_keys)
        if (!named && !out.isEmpty()) prefix = out.keySet().iterator().next().substring(0, 25);
        int n = node.get("branches").size();
        List<KStream> branches = new ArrayList<>();
        for (int i = 0; i < specs.size(); i++) {
            JsonNode br = specs.get(i);
            String key = prefix + (br.hasNonNull("name")
                ? text(br, "name") : String.valueOf(i == n ? 0 : i + 1));
            KStream s = out.get(key);
            if (s == null) throw new IllegalStateException("no branch " + key + " in " + out);
            branches.add(s);
        }
        return branches;
    }

    /** A spec branch's Branched (null: none), a value mapper chained inline by its "map". */
    private static Branched branched(JsonNode br) {
        String name = br.hasNonNull("name") ? text(br, "name") : null;
        if (br.has("map")) {
            ValueMapper<Object, Object> m = Library.get(Library.VALUE_MAPPERS, text(br, "map"));
            Function<KStream<Object, Object>, KStream<Object, Object>> f = s -> s.mapValues(m);
            return name == null
                ? Branched.<Object, Object>withFunction(f)
                : Branched.<Object, Object>withFunction(f, name);
        }
        return name == null ? null : Branched.as(name);
    }

    private KStream toStream(JsonNode node) {
        KTable t = (KTable) in(node, 0);
        Named n = named(node);
        if (node.has("fn")) {
            var m = Library.get(Library.KEY_SELECTORS, text(node, "fn"));
            return n == null ? t.toStream(m) : t.toStream(m, n);
        }
        if (!node.path("windowed").asBoolean()) return n == null ? t.toStream() : t.toStream(n);
        // a windowed key becomes the text "key@start/end", as in tests/oracle/spec.py
        org.apache.kafka.streams.kstream.KeyValueMapper<Object, Object, Object> m = (wk, v) -> {
            Windowed<String> w = (Windowed<String>) wk;
            return w.key() + "@" + w.window().start() + "/" + w.window().end();
        };
        return n == null ? t.toStream(m) : t.toStream(m, n);
    }

    private Object groupBy(JsonNode node, Serde<Object> vs) {
        Object input = in(node, 0);
        String fn = text(node, "fn");
        if (input instanceof KTable) {
            return ((KTable) input).groupBy(
                Library.get(Library.KV_MAPPERS, fn), grouped(node, vs));
        }
        return ((KStream) input).groupBy(
            Library.get(Library.KEY_SELECTORS, fn), grouped(node, vs));
    }

    private Object windowedBy(JsonNode node) {
        if (in(node, 0) instanceof CogroupedKStream) {
            return NewOperators.windowedCogroup((CogroupedKStream) in(node, 0), node.get("windows"));
        }
        KGroupedStream g = (KGroupedStream) in(node, 0);
        JsonNode w = node.get("windows");
        boolean fin = "final".equals(text(node, "emit"));
        switch (text(w, "type")) {
            case "time": {
                TimeWindows tw = TimeWindows.ofSizeAndGrace(ms(w, "size"), ms(w, "grace"))
                    .advanceBy(ms(w, "advance"));
                TimeWindowedKStream ws = g.windowedBy(tw);
                return fin ? ws.emitStrategy(EmitStrategy.onWindowClose()) : ws;
            }
            case "sliding": {
                SlidingWindows sw = SlidingWindows.ofTimeDifferenceAndGrace(
                    ms(w, "size"), ms(w, "grace"));
                TimeWindowedKStream ws = g.windowedBy(sw);
                return fin ? ws.emitStrategy(EmitStrategy.onWindowClose()) : ws;
            }
            case "session": {
                SessionWindows sw = SessionWindows.ofInactivityGapAndGrace(
                    ms(w, "gap"), ms(w, "grace"));
                SessionWindowedKStream ws = g.windowedBy(sw);
                return fin ? ws.emitStrategy(EmitStrategy.onWindowClose()) : ws;
            }
            default:
                throw new IllegalArgumentException("unknown windows " + w);
        }
    }

    private Object aggregation(JsonNode node, String op) {
        Object g = in(node, 0);
        Materialized m = materialized(node);
        String fn = node.path("fn").asText();
        Named n = named(node);
        if (g instanceof CogroupedKStream || g instanceof TimeWindowedCogroupedKStream
                || g instanceof SessionWindowedCogroupedKStream) {
            return NewOperators.cogroupAggregate(node, g, m);
        }
        if (g instanceof KGroupedTable) {
            KGroupedTable t = (KGroupedTable) g;
            String sub = node.path("subtractor").asText();
            switch (op) {
                case "count": return n == null ? t.count(m) : t.count(n, m);
                case "reduce": {
                    var add = Library.get(Library.REDUCERS, fn);
                    var minus = Library.get(Library.REDUCERS, sub);
                    return n == null ? t.reduce(add, minus, m) : t.reduce(add, minus, n, m);
                }
                default: {
                    var init = Library.get(Library.INITIALIZERS, fn);
                    var add = Library.get(Library.AGGREGATORS, fn);
                    var minus = Library.get(Library.AGGREGATORS, sub);
                    return n == null ? t.aggregate(init, add, minus, m)
                        : t.aggregate(init, add, minus, n, m);
                }
            }
        }
        if (g instanceof SessionWindowedKStream) {
            SessionWindowedKStream s = (SessionWindowedKStream) g;
            switch (op) {
                case "count": return s.count(m);
                case "reduce": return s.reduce(Library.get(Library.REDUCERS, fn), m);
                default:
                    return s.aggregate(Library.get(Library.INITIALIZERS, fn),
                        Library.get(Library.AGGREGATORS, fn),
                        Library.get(Library.MERGERS, text(node, "merger")), m);
            }
        }
        if (g instanceof TimeWindowedKStream) {
            TimeWindowedKStream s = (TimeWindowedKStream) g;
            switch (op) {
                case "count": return s.count(m);
                case "reduce": return s.reduce(Library.get(Library.REDUCERS, fn), m);
                default:
                    return s.aggregate(Library.get(Library.INITIALIZERS, fn),
                        Library.get(Library.AGGREGATORS, fn), m);
            }
        }
        KGroupedStream s = (KGroupedStream) g;
        switch (op) {
            case "count": return n == null ? s.count(m) : s.count(n, m);
            case "reduce": {
                var r = Library.get(Library.REDUCERS, fn);
                return n == null ? s.reduce(r, m) : s.reduce(r, n, m);
            }
            default: {
                var init = Library.get(Library.INITIALIZERS, fn);
                var add = Library.get(Library.AGGREGATORS, fn);
                return n == null ? s.aggregate(init, add, m) : s.aggregate(init, add, n, m);
            }
        }
    }

    private Object join(JsonNode node, String op) {
        Object left = in(node, 0);
        Object right = in(node, 1);
        if (node.path("with_key").asBoolean()) return joinWithKey(node, op);
        var joiner = Library.get(Library.JOINERS, text(node, "fn"));
        if (left instanceof KTable) {
            return NewOperators.tableJoin(node, op, (KTable) left, (KTable) right, joiner);
        }
        KStream l = (KStream) left;
        if (right instanceof GlobalKTable) {
            GlobalKTable g = (GlobalKTable) right;
            var selector = Library.get(Library.KEY_SELECTORS, text(node, "selector"));
            return "join".equals(op) ? l.join(g, selector, joiner) : l.leftJoin(g, selector, joiner);
        }
        Serde<Object> lvs = serde(vtOf(node, 0));
        Serde<Object> rvs = serde(vtOf(node, 1));
        if (right instanceof KTable) {
            KTable r = (KTable) right;
            Joined joined = joined(node, lvs, rvs);
            return "join".equals(op) ? l.join(r, joiner, joined) : l.leftJoin(r, joiner, joined);
        }
        KStream r = (KStream) right;
        JsonNode w = node.get("window");
        JoinWindows jw = JoinWindows.ofTimeDifferenceAndGrace(ms(w, "before"), ms(w, "grace"))
            .before(ms(w, "before"))
            .after(ms(w, "after"));
        StreamJoined sj = StreamJoined.with(KEY, lvs, rvs);
        switch (op) {
            case "join": return l.join(r, joiner, jw, sj);
            case "leftJoin": return l.leftJoin(r, joiner, jw, sj);
            default: return l.outerJoin(r, joiner, jw, sj);
        }
    }

    /** A stream-table join's Joined: with the node's "grace" (a versioned table's) if any. */
    private static Joined joined(JsonNode node, Serde<Object> lvs, Serde<Object> rvs) {
        Joined joined = Joined.with(KEY, lvs, rvs);
        return node.has("grace") ? joined.withGracePeriod(ms(node, "grace")) : joined;
    }

    /** processValues's processor: forwards each record with its value mapped (spec.py's twin). */
    static final class MapValuesProcessor implements FixedKeyProcessor<Object, Object, Object> {
        private final ValueMapper<Object, Object> mapper;
        private FixedKeyProcessorContext<Object, Object> context;

        MapValuesProcessor(ValueMapper<Object, Object> mapper) {
            this.mapper = mapper;
        }

        @Override
        public void init(FixedKeyProcessorContext<Object, Object> context) {
            this.context = context;
        }

        @Override
        public void process(FixedKeyRecord<Object, Object> record) {
            context.forward(record.withValue(mapper.apply(record.value())));
        }
    }

    /** A stream's join with a ValueJoinerWithKey (spec.py: `with_key=True`). */
    private Object joinWithKey(JsonNode node, String op) {
        KStream l = (KStream) in(node, 0);
        Object right = in(node, 1);
        var joiner = Library.get(Library.JOINERS_WITH_KEY, text(node, "fn"));
        if (right instanceof GlobalKTable) {
            GlobalKTable g = (GlobalKTable) right;
            var selector = Library.get(Library.KEY_SELECTORS, text(node, "selector"));
            return "join".equals(op) ? l.join(g, selector, joiner) : l.leftJoin(g, selector, joiner);
        }
        Serde<Object> lvs = serde(vtOf(node, 0));
        Serde<Object> rvs = serde(vtOf(node, 1));
        if (right instanceof KTable) {
            KTable r = (KTable) right;
            Joined joined = joined(node, lvs, rvs);
            return "join".equals(op) ? l.join(r, joiner, joined) : l.leftJoin(r, joiner, joined);
        }
        KStream r = (KStream) right;
        JsonNode w = node.get("window");
        JoinWindows jw = JoinWindows.ofTimeDifferenceAndGrace(ms(w, "before"), ms(w, "grace"))
            .before(ms(w, "before"))
            .after(ms(w, "after"));
        StreamJoined sj = StreamJoined.with(KEY, lvs, rvs);
        switch (op) {
            case "join": return l.join(r, joiner, jw, sj);
            case "leftJoin": return l.leftJoin(r, joiner, jw, sj);
            default: return l.outerJoin(r, joiner, jw, sj);
        }
    }
}
