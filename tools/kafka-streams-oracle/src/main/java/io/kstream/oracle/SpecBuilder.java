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
import org.apache.kafka.streams.kstream.SessionWindowedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueMapper;
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

    private static String text(JsonNode node, String field) {
        return node.get(field).asText();
    }

    private static Duration ms(JsonNode node, String field) {
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
                return builder.stream(text(node, "topic"), Consumed.with(KEY, vs));
            case "table":
                return builder.table(text(node, "topic"), Consumed.with(KEY, vs), materialized(node));
            case "globalTable":
                return builder.globalTable(
                    text(node, "topic"), Consumed.with(KEY, vs), materialized(node));
            case "to":
                ((KStream) in(node, 0)).to(text(node, "topic"), Produced.with(KEY, vs));
                return null;
            case "split":
                return split(node);
            case "branch":
                return ((List<KStream>) in(node, 0)).get(node.get("index").asInt());
            case "merge":
                return ((KStream) in(node, 0)).merge((KStream) in(node, 1));
            case "repartition":
                return ((KStream) in(node, 0)).repartition(Repartitioned.with(KEY, vs));
            case "toTable":
                return ((KStream) in(node, 0)).toTable(materialized(node));
            case "toStream":
                return toStream(node);
            case "groupByKey":
                return ((KStream) in(node, 0)).groupByKey(Grouped.with(KEY, vs));
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
            default:
                return stateless(node, op);
        }
    }

    private Object stateless(JsonNode node, String op) {
        Object input = in(node, 0);
        String fn = text(node, "fn");
        if (node.path("with_key").asBoolean()) {  // a ValueMapperWithKey
            if (input instanceof KTable) {
                return ((KTable) input).mapValues(
                    Library.get(Library.VALUE_MAPPERS_WITH_KEY, fn));
            }
            KStream s = (KStream) input;
            return "mapValues".equals(op)
                ? s.mapValues(Library.get(Library.VALUE_MAPPERS_WITH_KEY, fn))
                : s.flatMapValues(Library.get(Library.FLAT_VALUE_MAPPERS_WITH_KEY, fn));
        }
        if (input instanceof KTable) {
            KTable t = (KTable) input;
            switch (op) {
                case "filter": return t.filter(Library.get(Library.PREDICATES, fn));
                case "filterNot": return t.filterNot(Library.get(Library.PREDICATES, fn));
                case "mapValues": return t.mapValues(Library.get(Library.VALUE_MAPPERS, fn));
                default: throw new IllegalArgumentException("no table operator " + op);
            }
        }
        KStream s = (KStream) input;
        switch (op) {
            case "filter": return s.filter(Library.get(Library.PREDICATES, fn));
            case "filterNot": return s.filterNot(Library.get(Library.PREDICATES, fn));
            case "mapValues": return s.mapValues(Library.get(Library.VALUE_MAPPERS, fn));
            case "map": return s.map(Library.get(Library.KV_MAPPERS, fn));
            case "selectKey": return s.selectKey(Library.get(Library.KEY_SELECTORS, fn));
            case "flatMap": return s.flatMap(Library.get(Library.FLAT_MAPPERS, fn));
            case "flatMapValues":
                return s.flatMapValues(Library.get(Library.FLAT_VALUE_MAPPERS, fn));
            case "processValues":
                return s.processValues(() -> new MapValuesProcessor(
                    Library.get(Library.VALUE_MAPPERS, fn)));
            default: throw new IllegalArgumentException("no stream operator " + op);
        }
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
        if (node.has("fn")) return t.toStream(Library.get(Library.KEY_SELECTORS, text(node, "fn")));
        if (!node.path("windowed").asBoolean()) return t.toStream();
        // a windowed key becomes the text "key@start/end", as in tests/oracle/spec.py
        return t.toStream((wk, v) -> {
            Windowed<String> w = (Windowed<String>) wk;
            return w.key() + "@" + w.window().start() + "/" + w.window().end();
        });
    }

    private Object groupBy(JsonNode node, Serde<Object> vs) {
        Object input = in(node, 0);
        String fn = text(node, "fn");
        if (input instanceof KTable) {
            return ((KTable) input).groupBy(
                Library.get(Library.KV_MAPPERS, fn), Grouped.with(KEY, vs));
        }
        return ((KStream) input).groupBy(
            Library.get(Library.KEY_SELECTORS, fn), Grouped.with(KEY, vs));
    }

    private Object windowedBy(JsonNode node) {
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
        if (g instanceof KGroupedTable) {
            KGroupedTable t = (KGroupedTable) g;
            String sub = node.path("subtractor").asText();
            switch (op) {
                case "count": return t.count(m);
                case "reduce":
                    return t.reduce(Library.get(Library.REDUCERS, fn),
                        Library.get(Library.REDUCERS, sub), m);
                default:
                    return t.aggregate(Library.get(Library.INITIALIZERS, fn),
                        Library.get(Library.AGGREGATORS, fn),
                        Library.get(Library.AGGREGATORS, sub), m);
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
            case "count": return s.count(m);
            case "reduce": return s.reduce(Library.get(Library.REDUCERS, fn), m);
            default:
                return s.aggregate(Library.get(Library.INITIALIZERS, fn),
                    Library.get(Library.AGGREGATORS, fn), m);
        }
    }

    private Object join(JsonNode node, String op) {
        Object left = in(node, 0);
        Object right = in(node, 1);
        if (node.path("with_key").asBoolean()) return joinWithKey(node, op);
        var joiner = Library.get(Library.JOINERS, text(node, "fn"));
        if (left instanceof KTable) {
            KTable l = (KTable) left;
            KTable r = (KTable) right;
            switch (op) {
                case "join": return l.join(r, joiner);
                case "leftJoin": return l.leftJoin(r, joiner);
                default: return l.outerJoin(r, joiner);
            }
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
            Joined joined = Joined.with(KEY, lvs, rvs);
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
            Joined joined = Joined.with(KEY, lvs, rvs);
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
