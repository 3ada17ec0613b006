package io.kstream.oracle;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.function.Function;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.CogroupedKStream;
import org.apache.kafka.streams.kstream.Initializer;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.SessionWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.Suppressed.BufferConfig;
import org.apache.kafka.streams.kstream.TableJoined;
import org.apache.kafka.streams.kstream.TimeWindowedCogroupedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueJoiner;

/**
 * The operators of issue 37 that SpecBuilder builds here, each as spec.py builds it with
 * kstream's DSL: cogroup (KIP-150), suppress, and the table-table join's materialized, named
 * and foreign-key (KIP-213) forms.
 */
@SuppressWarnings({"unchecked", "rawtypes"})
final class NewOperators {
    private NewOperators() {}

    /** `cogroup {fn}`: in [grouped] starts a cogroup, in [cogroup, grouped] adds an input. */
    static CogroupedKStream cogroup(JsonNode node, Object first, Object second) {
        Aggregator agg = Library.get(Library.AGGREGATORS, SpecBuilder.text(node, "fn"));
        if (first instanceof CogroupedKStream) {
            return ((CogroupedKStream) first).cogroup((KGroupedStream) second, agg);
        }
        return ((KGroupedStream) first).cogroup(agg);
    }

    /** `windowedBy {windows}` of a cogroup (no emit strategy: cogroups emit every update). */
    static Object windowedCogroup(CogroupedKStream c, JsonNode w) {
        switch (SpecBuilder.text(w, "type")) {
            case "time":
                return c.windowedBy(TimeWindows.ofSizeAndGrace(
                        SpecBuilder.ms(w, "size"), SpecBuilder.ms(w, "grace"))
                    .advanceBy(SpecBuilder.ms(w, "advance")));
            case "sliding":
                return c.windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(
                    SpecBuilder.ms(w, "size"), SpecBuilder.ms(w, "grace")));
            case "session":
                return c.windowedBy(SessionWindows.ofInactivityGapAndGrace(
                    SpecBuilder.ms(w, "gap"), SpecBuilder.ms(w, "grace")));
            default:
                throw new IllegalArgumentException("unknown windows " + w);
        }
    }

    /** `aggregate {init, merger?}` of a cogroup, windowed or not. */
    static KTable cogroupAggregate(JsonNode node, Object g, Materialized m) {
        Initializer init = Library.get(Library.INITIALIZERS, SpecBuilder.text(node, "init"));
        Named n = SpecBuilder.named(node);
        if (g instanceof SessionWindowedCogroupedKStream) {
            SessionWindowedCogroupedKStream s = (SessionWindowedCogroupedKStream) g;
            var merger = Library.get(Library.MERGERS, SpecBuilder.text(node, "merger"));
            return n == null ? s.aggregate(init, merger, m) : s.aggregate(init, merger, n, m);
        }
        if (g instanceof TimeWindowedCogroupedKStream) {
            TimeWindowedCogroupedKStream s = (TimeWindowedCogroupedKStream) g;
            return n == null ? s.aggregate(init, m) : s.aggregate(init, n, m);
        }
        CogroupedKStream c = (CogroupedKStream) g;
        return n == null ? c.aggregate(init, m) : c.aggregate(init, n, m);
    }

    /**
     * `suppress {until, time_limit, name?, buffer: {max_records?, max_bytes?, full}}`: no
     * limit is an unbounded buffer; "full" is what a bounded one does when over a limit.
     */
    static KTable suppress(JsonNode node, KTable t) {
        JsonNode b = node.get("buffer");
        boolean shutdown = "shutdown".equals(b.path("full").asText("emit"));
        Suppressed s;
        if ("windowCloses".equals(SpecBuilder.text(node, "until"))) {
            Suppressed.StrictBufferConfig strict = BufferConfig.unbounded();
            if (b.has("max_records") || b.has("max_bytes")) {
                strict = limited(b).shutDownWhenFull();
            }
            s = Suppressed.untilWindowCloses(strict);
        } else {
            BufferConfig config = BufferConfig.unbounded();
            if (b.has("max_records") || b.has("max_bytes")) {
                BufferConfig l = limited(b);
                config = shutdown ? l.shutDownWhenFull() : l.emitEarlyWhenFull();
            }
            s = Suppressed.untilTimeLimit(SpecBuilder.ms(node, "time_limit"), config);
        }
        if (node.hasNonNull("name")) s = s.withName(SpecBuilder.text(node, "name"));
        return t.suppress(s);
    }

    private static BufferConfig limited(JsonNode b) {
        if (b.has("max_records")) {
            BufferConfig c = BufferConfig.maxRecords(b.get("max_records").asLong());
            return b.has("max_bytes") ? c.withMaxBytes(b.get("max_bytes").asLong()) : c;
        }
        return BufferConfig.maxBytes(b.get("max_bytes").asLong());
    }

    /** A table-table join: on the key, or on a foreign key ("fk"); named, materialized. */
    static KTable tableJoin(JsonNode node, String op, KTable l, KTable r, ValueJoiner joiner) {
        Materialized m = node.has("materialized") ? SpecBuilder.resultStore(node) : null;
        Named n = SpecBuilder.named(node);
        if (node.has("fk")) {
            Function fk = Library.get(PortedLibrary.FK_EXTRACTORS, SpecBuilder.text(node, "fk"));
            // the result's serdes, for the store Kafka keeps when one is needed below (an
            // unnamed Materialized is no queryable store: describe() shows it only then)
            if (m == null) m = Materialized.with(SpecBuilder.KEY, SpecBuilder.serde("string"));
            boolean inner = "join".equals(op);
            TableJoined tj = n == null ? null : TableJoined.as(SpecBuilder.text(node, "name"));
            if (m == null && tj == null) return inner ? l.join(r, fk, joiner) : l.leftJoin(r, fk, joiner);
            if (m == null) return inner ? l.join(r, fk, joiner, tj) : l.leftJoin(r, fk, joiner, tj);
            if (tj == null) return inner ? l.join(r, fk, joiner, m) : l.leftJoin(r, fk, joiner, m);
            return inner ? l.join(r, fk, joiner, tj, m) : l.leftJoin(r, fk, joiner, tj, m);
        }
        switch (op) {
            case "join":
                if (m == null) return n == null ? l.join(r, joiner) : l.join(r, joiner, n);
                return n == null ? l.join(r, joiner, m) : l.join(r, joiner, n, m);
            case "leftJoin":
                if (m == null) return n == null ? l.leftJoin(r, joiner) : l.leftJoin(r, joiner, n);
                return n == null ? l.leftJoin(r, joiner, m) : l.leftJoin(r, joiner, n, m);
            default:
                if (m == null) return n == null ? l.outerJoin(r, joiner) : l.outerJoin(r, joiner, n);
                return n == null ? l.outerJoin(r, joiner, m) : l.outerJoin(r, joiner, n, m);
        }
    }
}
