package io.kstream.oracle;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.kstream.Aggregator;
import org.apache.kafka.streams.kstream.Initializer;
import org.apache.kafka.streams.kstream.KeyValueMapper;
import org.apache.kafka.streams.kstream.Merger;
import org.apache.kafka.streams.kstream.Predicate;
import org.apache.kafka.streams.kstream.Reducer;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.kstream.ValueJoinerWithKey;
import org.apache.kafka.streams.kstream.ValueMapper;
import org.apache.kafka.streams.kstream.ValueMapperWithKey;

/**
 * The fixed function library a spec names its functions from. tests/oracle/library.py holds
 * the same functions, name for name, in Python: no code crosses languages, only names. Values
 * are Strings or Longs (or null); every function is total over null (time and session window
 * aggregations hand null values to reducers and aggregators).
 */
final class Library {
    private Library() {}

    static String head(Object v) {
        String s = (String) v;
        return s.isEmpty() ? "" : s.substring(0, 1);
    }

    static String render(Object v) {
        return String.valueOf(v);
    }

    static String upper(Object k) {
        return k == null ? null : ((String) k).toUpperCase(Locale.ROOT);
    }

    static long num(Object v) {
        return v == null ? 0L : (Long) v;
    }

    static long len(Object v) {
        return v == null ? 0L : ((String) v).length();
    }

    static String modKey(Object v) {
        return v == null ? null : "m" + Math.floorMod((Long) v, 3L);
    }

    /** Word i of a text split at single spaces (Python's str.split(" ")), or null. */
    static String word(Object v, int i) {
        if (v == null) return null;
        String[] words = ((String) v).split(" ", -1);
        return i < words.length ? words[i] : null;
    }

    /** Token i of a text split at commas (Python's str.split(",")), or null. */
    static String token(Object v, int i) {
        if (v == null) return null;
        String[] tokens = ((String) v).split(",", -1);
        return i < tokens.length ? tokens[i] : null;
    }

    private static final Pattern WORD = Pattern.compile("[a-z0-9_]+");

    /** Two maps as one (Map.of takes at most ten entries). */
    static <T> Map<String, T> merged(Map<String, T> a, Map<String, T> b) {
        Map<String, T> out = new HashMap<>(a);
        out.putAll(b);
        return Map.copyOf(out);
    }

    static boolean keyMultiple(Object k, long n) {
        return k != null && Long.parseLong((String) k) % n == 0;
    }

    static final Map<String, Predicate<Object, Object>> PREDICATES = merged(Map.of(
        "key_is_a", (k, v) -> "a".equals(k),
        "key_not_null", (k, v) -> k != null,
        "value_not_null", (k, v) -> v != null,
        "short_value", (k, v) -> v != null && ((String) v).length() <= 1,
        "even", (k, v) -> v != null && (Long) v % 2 == 0,
        "small", (k, v) -> v != null && (Long) v < 5,
        "starts_with_skip", (k, v) -> v != null && ((String) v).startsWith("skip")), Map.of(
        // only the conformance cases name these (library.py's CONFORMANCE_ONLY)
        "key_even", (k, v) -> keyMultiple(k, 2),
        "key_multiple_of_3", (k, v) -> keyMultiple(k, 3),
        "key_multiple_of_5", (k, v) -> keyMultiple(k, 5),
        "is_accept", (k, v) -> v != null && ((String) v).toLowerCase(Locale.ROOT).equals("accept")));

    static final Map<String, ValueMapper<Object, Object>> VALUE_MAPPERS = Map.of(
        "upper", v -> upper(v),
        "twice", v -> v == null ? null : (String) v + v,
        "len", v -> v == null ? null : (long) ((String) v).length(),
        "inc", v -> v == null ? null : (Long) v + 1,
        "str", v -> v == null ? null : render(v),
        "null_to_text", v -> render(v),
        "drop_a", v -> v == null || ((String) v).contains("a") ? null : v,
        "digit", v -> v == null ? null : (long) (((String) v).charAt(0) - 48));

    static final Map<String, KeyValueMapper<Object, Object, KeyValue<Object, Object>>> KV_MAPPERS =
        Map.of(
            "swap", (k, v) -> KeyValue.pair(v, k),
            "key_head", (k, v) -> KeyValue.pair(v == null ? null : head(v), v),
            "upper_key", (k, v) -> KeyValue.pair(upper(k), v),
            "key_plus_value", (k, v) -> KeyValue.pair(k, v == null ? null : render(k) + v),
            "mod_key", (k, v) -> KeyValue.pair(modKey(v), v),
            "const_key", (k, v) -> KeyValue.pair("z", v),
            "identity", (k, v) -> KeyValue.pair(k, v),
            "null_key_if_x", (k, v) -> KeyValue.pair("x".equals(v) ? null : k, v),
            "by_first_word", (k, v) -> v == null ? KeyValue.pair(null, null)
                : KeyValue.pair(word(v, 0), render(k) + " " + v),
            // MockMapper.selectValueKeyValueMapper (the conformance cases only)
            "value_pair", (k, v) -> KeyValue.pair(v, v));

    private static final Map<String, KeyValueMapper<Object, Object, Object>> KEY_SELECTORS_1 = Map.of(
        "value_head", (k, v) -> v == null ? null : head(v),
        "upper_key", (k, v) -> upper(k),
        "const_z", (k, v) -> "z",
        "null_key", (k, v) -> null,
        "mod_key", (k, v) -> modKey(v),
        "same_key", (k, v) -> k,
        "value", (k, v) -> v,
        "first_word", (k, v) -> word(v, 0),
        "third_word", (k, v) -> word(v, 2),
        // the second comma-separated token: Kafka's global-join tests' foreign key
        "second_token", (k, v) -> token(v, 1));

    static final Map<String, KeyValueMapper<Object, Object, Object>> KEY_SELECTORS = merged(
        KEY_SELECTORS_1, Map.of(
            "head_unless_skip", (k, v) -> v == null || "skip".equals(v) ? null : head(v)));

    static final Map<String, ValueMapper<Object, Iterable<Object>>> FLAT_VALUE_MAPPERS = Map.of(
        "chars", v -> {
            List<Object> out = new ArrayList<>();
            if (v != null) {
                for (char c : ((String) v).toCharArray()) out.add(String.valueOf(c));
            }
            return out;
        },
        "dup", v -> {
            List<Object> out = new ArrayList<>();
            out.add(v);
            out.add(v);
            return out;
        },
        "none", v -> new ArrayList<>(),
        "v_and_V", v -> List.of("v" + render(v), "V" + render(v)),
        "words", v -> {
            List<Object> out = new ArrayList<>();
            if (v != null) {
                Matcher m = WORD.matcher(((String) v).toLowerCase(Locale.ROOT));
                while (m.find()) out.add(m.group());
            }
            return out;
        });

    static final Map<String, KeyValueMapper<Object, Object, Iterable<KeyValue<Object, Object>>>>
        FLAT_MAPPERS = Map.of(
            "fanout", (k, v) -> List.of(
                KeyValue.pair(k, v), KeyValue.pair(k == null ? null : (String) k + k, v)),
            "chars_keys", (k, v) -> {
                List<KeyValue<Object, Object>> out = new ArrayList<>();
                if (v != null) {
                    for (char c : ((String) v).toCharArray()) {
                        out.add(KeyValue.pair(String.valueOf(c), v));
                    }
                }
                return out;
            },
            // Kafka's MockMapper.noOpFlatKeyValueMapper
            "single", (k, v) -> List.of(KeyValue.pair(k, v)),
            // KStreamFlatMapTest's mapper: key k gives k records keyed "k*10+i"
            "key_fanout", (k, v) -> {
                List<KeyValue<Object, Object>> out = new ArrayList<>();
                long n = Long.parseLong((String) k);
                for (long i = 0; i < n; i++) out.add(KeyValue.pair(String.valueOf(n * 10 + i), v));
                return out;
            });

    static final Map<String, Reducer<Object>> REDUCERS = Map.of(
        "concat", (a, v) -> (String) a + v,
        "sum", (a, v) -> (Long) a + num(v),
        "max", (a, v) -> v == null ? a : (Object) Math.max((Long) a, (Long) v),
        // a table's adder and subtractor
        "plus_text", (a, v) -> (String) a + "+" + v,
        "minus_text", (a, v) -> (String) a + "-" + v,
        "minus", (a, v) -> (Long) a - (Long) v);

    static final Map<String, Initializer<Object>> INITIALIZERS = Map.of(
        "concat_agg", () -> "<",
        "sum_agg", () -> 0L,
        "len_agg", () -> 0L,
        "count_agg", () -> 0L,
        "plus_text_agg", () -> "",
        "plus_len_agg", () -> 0L);

    static final Map<String, Aggregator<Object, Object, Object>> AGGREGATORS = Map.of(
        "concat_agg", (k, v, a) -> (String) a + v,
        "sum_agg", (k, v, a) -> (Long) a + num(v),
        "len_agg", (k, v, a) -> (Long) a + len(v),
        "count_agg", (k, v, a) -> (Long) a + 1,
        // a table's adders and subtractors
        "plus_text_agg", (k, v, a) -> (String) a + "+" + v,
        "minus_text_agg", (k, v, a) -> (String) a + "-" + v,
        "plus_len_agg", (k, v, a) -> (Long) a + len(v),
        "minus_len_agg", (k, v, a) -> (Long) a - ((String) v).length(),
        "minus_sum_agg", (k, v, a) -> (Long) a - (Long) v);

    static final Map<String, Merger<Object, Object>> MERGERS = Map.of(
        "merge_text", (k, a, b) -> (String) a + "&" + b,
        "merge_sum", (k, a, b) -> (Long) a + (Long) b);

    static final Map<String, ValueJoiner<Object, Object, Object>> JOINERS = Map.of(
        "pair", (a, b) -> render(a) + "|" + render(b));

    /** A stream's joins with a ValueJoinerWithKey (library.py's JOINERS_WITH_KEY). */
    static final Map<String, ValueJoinerWithKey<Object, Object, Object, Object>> JOINERS_WITH_KEY =
        Map.of("key_pair", (k, a, b) -> render(k) + ":" + render(a) + "|" + render(b));

    /** mapValues with a ValueMapperWithKey (library.py's VALUE_MAPPERS_WITH_KEY). */
    static final Map<String, ValueMapperWithKey<Object, Object, Object>> VALUE_MAPPERS_WITH_KEY =
        Map.of(
            "key_dot_value", (k, v) -> render(k) + "." + render(v),
            "key_len", (k, v) -> v == null ? null : (long) (k == null ? 0 : ((String) k).length()));

    /** flatMapValues with a ValueMapperWithKey (library.py's FLAT_VALUE_MAPPERS_WITH_KEY). */
    static final Map<String, ValueMapperWithKey<Object, Object, Iterable<Object>>>
        FLAT_VALUE_MAPPERS_WITH_KEY = Map.of(
            "key_then_value", (k, v) -> List.of(render(k), render(v)));

    static <T> T get(Map<String, T> library, String name) {
        T fn = library.get(name);
        if (fn == null) throw new IllegalArgumentException("no library function " + name);
        return fn;
    }
}
