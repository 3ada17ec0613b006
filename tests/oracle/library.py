"""The fixed function library that oracle specs name their functions from.

The Java harness (tools/kafka-streams-oracle, `Library.java`) holds the same functions under the
same names, so a spec carries only names across the language boundary. Values are `str` or `int`
(Kafka's String and Long) or None, and every function is total over None exactly as its Java
twin is (Kafka's time and session window aggregations hand None values to reducers and
aggregators): a difference between the two would show up as a divergence that is not
kstream's.

Each function also has a signature (`Fn.accepts`, `Fn.gives`) so the generator only applies it
where it fits: "string", "long", or None for "any" (and, for `gives`, "the same as the input").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kstream.records import Record

STRING, LONG = "string", "long"
# functions only the conformance cases name (conformance_cases.py): they need numeric keys or
# particular texts, so the generator never draws them (`accepts` fits no value type)
CONFORMANCE_ONLY = "conformance"


@dataclass(frozen=True)
class Fn:
    """One library function: its name, what it applies to and what it gives."""

    name: str
    fn: Callable[..., Any]
    accepts: str | None = None
    gives: str | None = None

    def output(self, vt: str) -> str:
        """The value type of this function's results on values of type `vt`."""
        return self.gives or vt


def head(v: str) -> str:
    return v[:1]


def render(v: Any) -> str:
    """Java's `String.valueOf`: None is "null", a Long its decimal digits."""
    return "null" if v is None else str(v)


def upper(k: str | None) -> str | None:
    return None if k is None else k.upper()


def mod_key(v: int | None) -> str | None:
    """The text "m" and Java's `Math.floorMod(v, 3)`, which is Python's `%`."""
    return None if v is None else f"m{v % 3}"


def _key_multiple(k: str | None, n: int) -> bool:
    """A numeric text key that is a multiple of `n` (Java's `Long.parseLong(k) % n == 0`)."""
    return k is not None and int(k) % n == 0


def _num(v: int | None) -> int:
    return 0 if v is None else v


def _len(v: str | None) -> int:
    return 0 if v is None else len(v)


def _plus_text(k: str, v: str | None, agg: str) -> str:
    return f"{agg}+{render(v)}"


def _drop_a(v: str | None) -> str | None:
    return None if v is None or "a" in v else v


def word(v: str | None, i: int) -> str | None:
    """Word `i` of a text split at single spaces, or None (Java's `split(" ", -1)`)."""
    if v is None:
        return None
    words = v.split(" ")
    return words[i] if i < len(words) else None


def token(v: str | None, i: int) -> str | None:
    """Token `i` of a text split at commas, or None (Java's `split(",", -1)`)."""
    if v is None:
        return None
    tokens = v.split(",")
    return tokens[i] if i < len(tokens) else None


_WORD = re.compile(r"[a-z0-9_]+")


def words(v: str | None) -> list[str]:
    """The words of a text in lower case (ASCII letters, digits and "_")."""
    return [] if v is None else _WORD.findall(v.lower())


def _by_first_word(k: str | None, v: str | None) -> tuple[str | None, str | None]:
    return (None, None) if v is None else (word(v, 0), f"{render(k)} {v}")


def _table(*fns: Fn) -> dict[str, Fn]:
    return {f.name: f for f in fns}


PREDICATES = _table(
    Fn("key_is_a", lambda k, v: k == "a"),
    Fn("key_not_null", lambda k, v: k is not None),
    Fn("value_not_null", lambda k, v: v is not None),
    Fn("short_value", lambda k, v: v is not None and len(v) <= 1, STRING),
    Fn("even", lambda k, v: v is not None and v % 2 == 0, LONG),
    Fn("small", lambda k, v: v is not None and v < 5, LONG),
    Fn("starts_with_skip", lambda k, v: v is not None and v.startswith("skip"), STRING),
    Fn("key_even", lambda k, v: _key_multiple(k, 2), CONFORMANCE_ONLY),
    Fn("key_multiple_of_3", lambda k, v: _key_multiple(k, 3), CONFORMANCE_ONLY),
    Fn("key_multiple_of_5", lambda k, v: _key_multiple(k, 5), CONFORMANCE_ONLY),
    Fn("is_accept", lambda k, v: v is not None and v.lower() == "accept", CONFORMANCE_ONLY),
)

VALUE_MAPPERS = _table(
    Fn("upper", upper, STRING),
    Fn("twice", lambda v: None if v is None else v + v, STRING),
    Fn("len", lambda v: None if v is None else len(v), STRING, LONG),
    Fn("inc", lambda v: None if v is None else v + 1, LONG),
    Fn("str", lambda v: None if v is None else render(v), LONG, STRING),
    Fn("null_to_text", render, None, STRING),
    Fn("drop_a", _drop_a, STRING),
    Fn("digit", lambda v: None if v is None else ord(v[0]) - 48, CONFORMANCE_ONLY, LONG),
)

# (k, v) -> (k2, v2): KStream.map, and KTable.groupBy's selector
KV_MAPPERS = _table(
    Fn("swap", lambda k, v: (v, k), STRING),
    Fn("key_head", lambda k, v: (None if v is None else head(v), v), STRING),
    Fn("upper_key", lambda k, v: (upper(k), v)),
    Fn("key_plus_value", lambda k, v: (k, None if v is None else render(k) + v), STRING),
    Fn("mod_key", lambda k, v: (mod_key(v), v), LONG),
    Fn("const_key", lambda k, v: ("z", v)),
    Fn("identity", lambda k, v: (k, v)),
    Fn("null_key_if_x", lambda k, v: (None if v == "x" else k, v), STRING),
    Fn("by_first_word", _by_first_word, STRING),
    Fn("value_pair", lambda k, v: (v, v), CONFORMANCE_ONLY),  # MockMapper.selectValueKeyValueMapper
)

# (k, v) -> k2: selectKey, groupBy, and the global-table join's key selector
KEY_SELECTORS = _table(
    Fn("value_head", lambda k, v: None if v is None else head(v), STRING),
    Fn("upper_key", lambda k, v: upper(k)),
    Fn("const_z", lambda k, v: "z"),
    Fn("null_key", lambda k, v: None),
    Fn("mod_key", lambda k, v: mod_key(v), LONG),
    Fn("same_key", lambda k, v: k),
    Fn("value", lambda k, v: v, STRING),
    Fn("first_word", lambda k, v: word(v, 0), STRING),
    Fn("third_word", lambda k, v: word(v, 2), STRING),
    # the second comma-separated token: Kafka's global-join tests' foreign key
    Fn("second_token", lambda k, v: token(v, 1), STRING),
    Fn(
        "head_unless_skip",
        lambda k, v: None if v is None or v == "skip" else head(v),
        CONFORMANCE_ONLY,
    ),
)

FLAT_VALUE_MAPPERS = _table(
    Fn("chars", lambda v: [] if v is None else list(v), STRING),
    Fn("dup", lambda v: [v, v]),
    Fn("none", lambda v: []),
    Fn("words", words, STRING),
    Fn("v_and_V", lambda v: [f"v{render(v)}", f"V{render(v)}"], CONFORMANCE_ONLY, STRING),
)

# (k, v) -> v2: mapValues with a ValueMapperWithKey (`with_key=True`)
VALUE_MAPPERS_WITH_KEY = _table(
    Fn("key_dot_value", lambda k, v: f"{render(k)}.{render(v)}", None, STRING),
    Fn("key_len", lambda k, v: None if v is None else (0 if k is None else len(k)), None, LONG),
)

# (k, v) -> values: flatMapValues with a ValueMapperWithKey
FLAT_VALUE_MAPPERS_WITH_KEY = _table(
    Fn("key_then_value", lambda k, v: [render(k), render(v)], None, STRING),
)

FLAT_MAPPERS = _table(
    Fn("fanout", lambda k, v: [(k, v), (None if k is None else k + k, v)]),
    Fn("chars_keys", lambda k, v: [] if v is None else [(c, v) for c in v], STRING),
    Fn("single", lambda k, v: [(k, v)]),  # Kafka's MockMapper.noOpFlatKeyValueMapper
    # KStreamFlatMapTest's mapper: key k gives k records keyed "k*10+i"
    Fn(
        "key_fanout",
        lambda k, v: [(str(int(k) * 10 + i), v) for i in range(int(k))],
        CONFORMANCE_ONLY,
    ),
)

# (agg, v) -> agg: stream reducers, and a table's adder/subtractor pairs (see TABLE_REDUCERS)
REDUCERS = _table(
    Fn("concat", lambda a, v: a + render(v), STRING),
    Fn("sum", lambda a, v: a + _num(v), LONG),
    Fn("max", lambda a, v: a if v is None else max(a, v), LONG),
    Fn("plus_text", lambda a, v: f"{a}+{v}", STRING),
    Fn("minus_text", lambda a, v: f"{a}-{v}", STRING),
    Fn("minus", lambda a, v: a - v, LONG),
)


@dataclass(frozen=True)
class Aggregation:
    """An initializer and aggregator of one name (Java keeps them in two maps)."""

    name: str
    init: Callable[[], Any]
    add: Callable[[Any, Any, Any], Any]
    accepts: str | None
    gives: str


AGGREGATIONS = {
    a.name: a
    for a in (
        Aggregation("concat_agg", lambda: "<", lambda k, v, a: a + render(v), STRING, STRING),
        Aggregation("sum_agg", lambda: 0, lambda k, v, a: a + _num(v), LONG, LONG),
        Aggregation("len_agg", lambda: 0, lambda k, v, a: a + _len(v), STRING, LONG),
        Aggregation("count_agg", lambda: 0, lambda k, v, a: a + 1, None, LONG),
        Aggregation("plus_text_agg", lambda: "", _plus_text, STRING, STRING),
        Aggregation("plus_len_agg", lambda: 0, lambda k, v, a: a + _len(v), STRING, LONG),
    )
}

# a table aggregation's subtractor, by its adder
TABLE_SUBTRACTORS: dict[str, tuple[str, Callable[[Any, Any, Any], Any]]] = {
    "plus_text_agg": ("minus_text_agg", lambda k, v, a: f"{a}-{v}"),
    "plus_len_agg": ("minus_len_agg", lambda k, v, a: a - len(v)),
    "sum_agg": ("minus_sum_agg", lambda k, v, a: a - v),
}

# a table reduce's subtractor, by its adder
TABLE_REDUCERS = {"plus_text": "minus_text", "sum": "minus"}

# a session aggregation's merger, by the aggregate's type
MERGERS = _table(
    Fn("merge_text", lambda k, a, b: f"{a}&{b}", STRING),
    Fn("merge_sum", lambda k, a, b: a + b, LONG),
)
MERGER_FOR = {STRING: "merge_text", LONG: "merge_sum"}

JOINERS = _table(Fn("pair", lambda a, b: f"{render(a)}|{render(b)}", None, STRING))

# (k, a, b) -> v: a stream's joins with a ValueJoinerWithKey (`with_key=True`)
JOINERS_WITH_KEY = _table(
    Fn("key_pair", lambda k, a, b: f"{render(k)}:{render(a)}|{render(b)}", None, STRING)
)


def map_values_processor(fn: Callable[[Any], Any]) -> Callable[[], Any]:
    """`processValues`'s processor factory: forwards each record with its value mapped by
    `fn` (SpecBuilder.java's `MapValuesProcessor`)."""

    class MapValues:
        def init(self, ctx: Any) -> None:
            self.ctx = ctx

        def process(self, record: Any) -> None:
            self.ctx.forward(record.with_value(fn(record.value)))

    return MapValues


# --- user processors (the Processor API): Processors.java holds their Java twins --------


def _header_bytes(text: str) -> bytes:
    return text.encode("latin-1")


def _header_text(value: bytes | None) -> str:
    return "null" if value is None else bytes(value).decode("latin-1")


class _Count:
    """Counts records per key in a KV store and forwards the running count (a null key is
    skipped: Kafka's stores refuse null keys)."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, ctx: Any) -> None:
        self.ctx = ctx
        self.store = ctx.get_store(self.store_name)

    def process(self, record: Any) -> None:
        if record.key is None:
            return
        count = (self.store.get(record.key) or 0) + 1
        self.store.put(record.key, count)
        self.ctx.forward(record.with_value(count))


class _Buffer:
    """Keeps each key's latest value (a None value deletes it); each punctuation forwards the
    buffered records in key order, stamped with the punctuation's time, and empties the
    buffer."""

    def __init__(self, store: str, interval: int, clock: str) -> None:
        self.store_name = store
        self.interval = interval
        self.clock = clock

    def init(self, ctx: Any) -> None:
        self.ctx = ctx
        self.store = ctx.get_store(self.store_name)
        ctx.schedule(self.interval, self.clock, self.emit)

    def process(self, record: Any) -> None:
        if record.key is not None:
            self.store.put(record.key, record.value)

    def emit(self, time: int) -> None:
        with self.store.all() as cursor:
            buffered = sorted(cursor, key=lambda kv: kv[0])
        for key, value in buffered:
            self.store.delete(key)
            self.ctx.forward(Record(key, value, time))


class _AddHeader:
    """Forwards each record with a header "n" added: how many headers the record had."""

    def init(self, ctx: Any) -> None:
        self.ctx = ctx

    def process(self, record: Any) -> None:
        n = len(record.headers)
        self.ctx.forward(record.with_headers((*record.headers, ("n", _header_bytes(str(n))))))


class _HeadersText:
    """Replaces each value with the text of the record's headers: "k=v,k=v" ("" for none)."""

    def init(self, ctx: Any) -> None:
        self.ctx = ctx

    def process(self, record: Any) -> None:
        text = ",".join(f"{k}={_header_text(v)}" for k, v in record.headers)
        self.ctx.forward(record.with_value(text))


@dataclass(frozen=True)
class UserProcessor:
    """A library processor: `factory(store, interval)` gives a processor factory; `store`
    says whether it keeps a KV store, `punctuation` which clock it schedules on, if any."""

    name: str
    factory: Callable[[str, int], Callable[[], Any]]
    gives: str | None = None
    store: bool = False
    punctuation: str | None = None

    def output(self, vt: str) -> str:
        return self.gives or vt


PROCESSORS = {
    p.name: p
    for p in (
        UserProcessor("count", lambda s, i: lambda: _Count(s), LONG, store=True),
        UserProcessor(
            "buffer_stream_time",
            lambda s, i: lambda: _Buffer(s, i, "stream_time"),
            store=True,
            punctuation="stream_time",
        ),
        UserProcessor(
            "buffer_wall_clock",
            lambda s, i: lambda: _Buffer(s, i, "wall_clock"),
            store=True,
            punctuation="wall_clock",
        ),
        UserProcessor("add_header", lambda s, i: _AddHeader),
        UserProcessor("headers_text", lambda s, i: _HeadersText, STRING),
    )
}


GENERATED_SPLIT = len("KSTREAM-BRANCH-0000000000")


def branch_keys(split: dict[str, Any], branches: dict[str, Any]) -> list[str]:
    """The keys of a spec's `split` branches in the dict `default_branch` returns, in the
    spec's order: the split's name and each branch's name, or its position (from 1, the
    default 0). An unnamed split's generated name is read off a key (SpecBuilder.java does
    the same)."""
    if split.get("named", True):
        prefix = f"split-{split['id']}-"
    else:
        prefix = next(iter(branches))[:GENERATED_SPLIT] if branches else ""
    dflt = split["default"]
    specs = [*split["branches"], *([dflt] if dflt is not None else [])]
    keys = []
    for i, br in enumerate(specs):
        index = 0 if i == len(split["branches"]) else i + 1
        keys.append(prefix + (br["name"] if br.get("name") is not None else str(index)))
    return keys


def windowed_text(key: Any) -> str:
    """A windowed key as the text both sides render it to: "key@start/end"."""
    return f"{key.key}@{key.start}/{key.end}"


# --- the operators of ported applications (issue 37): PortedLibrary.java holds the twins ---

# a sink's topic chooser: the index, in the `to` node's `topics`, of the topic a record goes to
# (`fn(key, value, record_context)`, Kafka's TopicNameExtractor picking from a fixed list)
TOPIC_CHOOSERS = _table(
    Fn("key_is_a", lambda k, v, ctx: 0 if k == "a" else 1),
    Fn("value_null", lambda k, v, ctx: 1 if v is None else 0),
    Fn("odd_time", lambda k, v, ctx: ctx.timestamp % 2),
)


def _value_time(record: Any, partition_time: int) -> int:
    return record.timestamp if record.value is None else int(record.value)


# a source's timestamp extractor, `fn(record, partition_time) -> ms` (a negative one drops it)
TIMESTAMP_EXTRACTORS = _table(
    Fn("value_time", _value_time, LONG),  # a long value is the time
    Fn("negative_for_null", lambda r, pt: -1 if r.value is None else r.timestamp),
    Fn("partition_time_for_null", lambda r, pt: pt if r.value is None else r.timestamp),
)

# a foreign-key join's extractor: a left value -> the right table's key
FK_EXTRACTORS = _table(
    Fn("value_head", head, STRING),
    Fn("null_for_x", lambda v: None if v == "x" else head(v), STRING),
    Fn("abc_of_long", lambda v: "abc"[v % 3], LONG),
)


class _KeyEqualsValue:
    """ "key=value" for every update, deletes too (a delete becomes a value)."""

    def transform(self, key: Any, value: Any) -> str:
        return f"{render(key)}={render(value)}"


class _LengthOrNull:
    """The length of a text; a delete stays a delete."""

    def transform(self, key: Any, value: Any) -> int | None:
        return None if value is None else len(value)


class _CountCalls:
    """ "value#n", n counting the calls per key in the transformer's KV store."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, ctx: Any) -> None:
        self.calls = ctx.get_store(self.store_name)

    def transform(self, key: Any, value: Any) -> str:
        n = (self.calls.get(key) or 0) + 1
        self.calls.put(key, n)
        return f"{render(value)}#{n}"


@dataclass(frozen=True)
class Transformer:
    """A library value transformer (`KTable.transform_values`): `factory(store)` gives a
    transformer factory; `store` says whether it keeps a KV store (of longs)."""

    name: str
    factory: Callable[[str], Callable[[], Any]]
    accepts: str | None = None
    gives: str | None = None
    store: bool = False

    def output(self, vt: str) -> str:
        return self.gives or vt


VALUE_TRANSFORMERS = {
    t.name: t
    for t in (
        Transformer("key_equals_value", lambda s: _KeyEqualsValue, None, STRING),
        Transformer("length_or_null", lambda s: _LengthOrNull, STRING, LONG),
        Transformer("count_calls", lambda s: lambda: _CountCalls(s), None, STRING, store=True),
    )
}
