"""The record cache (`cache_max_bytes`) on the materialized results of table operators:
`filter`/`filter_not`, `map_values`, `transform_values`, table-table joins and foreign-key joins
given `materialized=` forward their updates through the cache, as Kafka's processors do over a
caching store (their `TimestampedTupleForwarder`).

Each topology runs in `Task`s, one per sub-topology, as the runtime runs them; records a task
writes to a repartition topic are handed to the task that reads it, and "a commit" flushes the
record caches, then the write caches, of every task until nothing is left in flight. The same
input runs with the cache off and on: the final table is the same, each key's outputs with the
cache are a subsequence of those without, and there are fewer of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kstream import stores
from kstream.dsl import KTable, StreamBuilder
from kstream.records import Record
from kstream.serde import serde
from kstream.state import open_store
from kstream.state.caching import CachingStore, RecordCache, cached
from kstream.state.spec import StoreSpec
from kstream.topology.task import Task

STR, LONG = serde("str"), serde("long")
ON = 10_000_000

Output = tuple[str, int | None, int]


class Pipeline:
    """A topology's sub-topologies in one task each (one partition per topic), its stores in
    the caching layer when `cache_bytes` > 0."""

    def __init__(self, builder: StreamBuilder, tmp: Path, cache_bytes: int) -> None:
        compiled = builder.build().compile("app")
        compiled.resolve_partitions({t: 1 for t in compiled.external_source_topics})
        self.cache = RecordCache(cache_bytes)
        self.sent: list[tuple[str, bytes | None, bytes | None, int]] = []
        self.reader = {t: i for i, s in enumerate(compiled.subtopologies) for t in s.source_topics}
        self.pending: list[Record] = []
        self.offsets: dict[str, int] = {}

        def opener(spec: StoreSpec, part: int) -> Any:
            store = open_store(spec, app_id="app", partition=part, state_dir=str(tmp))
            return cached(store, self.cache)

        self.tasks = [
            Task(compiled, i, 0, collector=self, open_store=opener)
            for i in range(len(compiled.subtopologies))
        ]

    # the collector the tasks' sinks write to
    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Any,
        partition: int | None,
    ) -> None:
        self.sent.append((topic, key, value, timestamp))
        if topic in self.reader:
            self.pending.append(self._record(topic, key, value, timestamp, headers))

    def partitions_for(self, topic: str) -> int:
        return 1

    def _record(
        self, topic: str, key: bytes | None, value: bytes | None, ts: int, headers: Any
    ) -> Record:
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        return Record(key, value, ts, headers, topic, 0, offset)

    def _deliver(self) -> None:
        while self.pending:
            r = self.pending.pop(0)
            self.tasks[self.reader[r.topic]].process([r])

    def pipe(self, topic: str, key: str, value: int | None, ts: int) -> None:
        vb = None if value is None else LONG.to_bytes(value)
        self.tasks[self.reader[topic]].process([self._record(topic, STR.to_bytes(key), vb, ts, ())])
        self._deliver()

    def commit(self) -> None:
        """Commit every task; what a flush sends through a repartition topic is processed and
        committed by the task reading it, until nothing is held back anywhere."""
        for _ in range(len(self.tasks) + 2):
            for task in self.tasks:
                task.flush_caches()
                task.flush_stores()
            if not self.pending:
                return
            self._deliver()
        raise AssertionError("updates still in flight after every task committed")

    def store(self, name: str) -> Any:
        return next(t.stores[name] for t in self.tasks if name in t.stores)

    def out(self, topic: str = "out") -> list[Output]:
        return [
            (STR.from_bytes(k), None if v is None else LONG.from_bytes(v), ts)
            for t, k, v, ts in self.sent
            if t == topic
        ]

    def close(self) -> None:
        for task in self.tasks:
            task.close()


@pytest.fixture
def pipelines() -> Iterator[list[Pipeline]]:
    made: list[Pipeline] = []
    yield made
    for p in made:
        p.close()


Feed = Sequence[tuple[str, str, int | None, int]]
"""(topic, key, value or None for a delete, timestamp)"""


def run(p: Pipeline, events: Feed, commit_every: int) -> list[Output]:
    for i, (topic, k, v, ts) in enumerate(events, 1):
        p.pipe(topic, k, v, ts)
        if i % commit_every == 0:
            p.commit()
    p.commit()
    return p.out()


def live(outputs: list[Output]) -> dict[str, int]:
    """The table the outputs leave behind: each key's last value, deleted keys left out."""
    table: dict[str, int | None] = {}
    for k, v, _ in outputs:
        table[k] = v
    return {k: v for k, v in table.items() if v is not None}


def per_key(outputs: list[Output]) -> dict[str, list[tuple[int | None, int]]]:
    by: dict[str, list[tuple[int | None, int]]] = {}
    for k, v, ts in outputs:
        by.setdefault(k, []).append((v, ts))
    return by


def is_subsequence(small: list[Any], big: list[Any]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def compare(
    make: Callable[[], StreamBuilder],
    tmp: Path,
    pipelines: list[Pipeline],
    events: Feed,
    commit_every: int,
    subsequence: bool = True,
) -> tuple[list[Output], list[Output]]:
    """The outputs of `events` with the cache off and on; asserts the cached ones end in the
    same table, and (`subsequence`) each key's are a subsequence of the uncached ones."""
    off = Pipeline(make(), tmp / "off", 0)
    on = Pipeline(make(), tmp / "on", ON)
    pipelines += [off, on]
    uncached, cached_out = run(off, events, commit_every), run(on, events, commit_every)
    assert live(cached_out) == live(uncached)
    if not subsequence:
        return uncached, cached_out
    before = per_key(uncached)
    for key, updates in per_key(cached_out).items():
        assert is_subsequence(updates, before.get(key, [])), (key, updates, before.get(key))
    return uncached, cached_out


def table_events(n: int, keys: int = 4, topic: str = "in", deletes: bool = True) -> Feed:
    """Upserts of `keys` keys, two in a row per key, some of them deletes, timestamps rising."""
    return [
        (topic, f"k{(i // 2) % keys}", None if deletes and i % 7 == 6 else (i * 5) % 11, 1000 + i)
        for i in range(n)
    ]


Op = Callable[[KTable, Any], KTable]


class Remembering:
    """A transformer with a store of its own, which it writes (each key's latest value); its
    result depends on the value only, so the final table does not depend on how many of a
    key's updates a cache above let through."""

    def init(self, ctx: Any) -> None:
        self.seen = ctx.get_store("seen")

    def transform(self, key: str, value: int | None) -> int | None:
        self.seen.put(key, value)
        return None if value is None else value * 10 + 1


OPS: dict[str, Op] = {
    "filter": lambda t, m: t.filter(lambda k, v: v % 2 == 0, materialized=m),
    "filter_not": lambda t, m: t.filter_not(lambda k, v: v > 8, materialized=m),
    "map_values": lambda t, m: t.map_values(lambda v: v * 10, materialized=m),
    "transform_values": lambda t, m: t.transform_values(
        Remembering, stores=[stores.key_value("seen", key_serde="str", value_serde="long")],
        materialized=m,
    ),
}  # fmt: skip


def operator(op: str, source_store: str | None, materialized: Any = "result") -> StreamBuilder:
    b = StreamBuilder()
    table = b.table("in", "str", "long", store=source_store)
    OPS[op](table, materialized).to_stream().to("out", "str", "long")
    return b


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("source_store", ["src", None])  # sends old values, or does not
@pytest.mark.parametrize("commit_every", [1, 3, 8])
def test_a_materialized_operator_coalesces_and_ends_equal(
    pipelines: list[Pipeline], tmp_path: Path, op: str, source_store: str | None, commit_every: int
) -> None:
    """With the source table's store named, the source caches too: the operator then sees
    coalesced updates, stamped with their latest update's time, so its outputs are compared
    with the uncached ones by their final table only."""
    events = table_events(48)
    off, on = compare(
        lambda: operator(op, source_store),
        tmp_path,
        pipelines,
        events,
        commit_every,
        subsequence=source_store is None,
    )
    if commit_every > 1:
        assert len(on) < len(off)
    else:  # one update per commit: nothing to coalesce, but deletes of absent keys
        assert len(on) <= len(off)
    assert isinstance(pipelines[-1].store("result"), CachingStore)
    assert pipelines[-1].store("result").dirty_count() == 0
    # the store holds the same table either way
    for key in {k for _, k, _, _ in events}:
        assert pipelines[-1].store("result").get(key) == pipelines[-2].store("result").get(key)


def test_a_commit_forwards_each_keys_latest_update_once(
    pipelines: list[Pipeline], tmp_path: Path
) -> None:
    on = Pipeline(operator("map_values", None), tmp_path, ON)  # the source forwards each update
    pipelines.append(on)
    for ts, (k, v) in enumerate([("a", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 5)], 10):
        on.pipe("in", k, v, ts)
    assert on.out() == []
    assert on.store("result").dirty_count() == 2
    on.commit()
    # in the order the keys became dirty, with the timestamp of each key's latest update
    assert on.out() == [("a", 40, 13), ("b", 50, 14)]


def test_a_filter_without_old_values_forwards_the_deletes_of_keys_that_existed_only(
    pipelines: list[Pipeline], tmp_path: Path
) -> None:
    """Uncached, a filter whose parent sends no old values forwards a tombstone for each update
    that does not match; cached, as Kafka's caching store, a delete is forwarded only for a
    key the filter's store held (the flush skips a null new and null stored old value)."""
    events: Feed = [("in", "odd", 1, 1), ("in", "even", 2, 2), ("in", "even", 3, 3)]
    off, on = compare(lambda: operator("filter", None), tmp_path, pipelines, events, 1)
    assert off == [("odd", None, 1), ("even", 2, 2), ("even", None, 3)]
    assert on == [("even", 2, 2), ("even", None, 3)]


def test_a_filter_flushes_old_values_from_its_store_for_a_regroup_below(
    pipelines: list[Pipeline], tmp_path: Path
) -> None:
    """A regroup below subtracts each update's old value from its group: the old value a flush
    forwards must be what the store held before the key's first update since the last flush,
    or the groups end wrong."""

    def make() -> StreamBuilder:
        b = StreamBuilder()
        table = b.table("in", "str", "long", store="src")
        kept = table.map_values(lambda v: v * 10, materialized="result")
        kept = kept.filter(lambda k, v: v != 30, materialized="kept")
        grouped = kept.group_by(lambda k, v: (str(v % 3), v), "str", "long")
        grouped.reduce(lambda a, v: a + v, lambda a, v: a - v, store="sums").to_stream().to(
            "out", "str", "long"
        )
        return b

    # a group's intermediate sums depend on which updates were coalesced: the final ones only
    off, on = compare(make, tmp_path, pipelines, table_events(60, keys=5), 7, subsequence=False)
    assert len(on) < len(off)


def test_a_store_with_caching_disabled_forwards_every_update(
    pipelines: list[Pipeline], tmp_path: Path
) -> None:
    spec = stores.key_value("result").with_caching_disabled()
    events = table_events(20)
    off = Pipeline(operator("map_values", None), tmp_path / "off", 0)
    on = Pipeline(operator("map_values", None, spec), tmp_path / "on", ON)
    pipelines += [off, on]
    assert run(on, events, 5) == run(off, events, 5)
    assert not isinstance(on.store("result"), CachingStore)


JOINS = ["join", "left_join", "outer_join"]


def joined(kind: str, materialized: Any = "joined") -> StreamBuilder:
    b = StreamBuilder()
    left = b.table("left", "str", "long", store="l")
    right = b.table("right", "str", "long", store="r")
    result = getattr(left, kind)(
        right, lambda a, c: (a or 0) * 100 + (c or 0), materialized=materialized
    )
    result.to_stream().to("out", "str", "long")
    return b


def two_sides(n: int) -> Feed:
    return [
        e
        for i in range(n)
        for e in (table_events(n, 3, "left")[i], table_events(n, 3, "right", False)[(i * 5) % n])
    ]


@pytest.mark.parametrize("kind", JOINS)
@pytest.mark.parametrize("commit_every", [1, 5])
def test_a_materialized_table_table_join_coalesces_and_ends_equal(
    pipelines: list[Pipeline], tmp_path: Path, kind: str, commit_every: int
) -> None:
    """The joined tables' stores are named, so they cache too: at a commit the left store's
    updates are flushed (and joined) before the right one's, not in the order they came in,
    so the outputs are compared by their final table only."""
    off, on = compare(
        lambda: joined(kind), tmp_path, pipelines, two_sides(30), commit_every, subsequence=False
    )
    if commit_every > 1:
        assert len(on) < len(off)
    else:
        assert len(on) <= len(off)
    assert isinstance(pipelines[-1].store("joined"), CachingStore)


def test_an_unmaterialized_join_forwards_every_update(
    pipelines: list[Pipeline], tmp_path: Path
) -> None:
    """Kafka's merge caches only with a store of its own (`materialized=`): at the commit, the
    left table's flush joins `a` once, the right table's flush joins it again; materialized,
    the two results of `a` leave the merge's cache as one."""
    events: Feed = [("right", "a", 1, 1), ("left", "a", 2, 2), ("left", "a", 3, 3)]
    outputs = []
    for materialized in (None, "joined"):
        p = Pipeline(joined("join", materialized), tmp_path / str(materialized), ON)
        pipelines.append(p)
        outputs.append(run(p, events, len(events)))
    assert outputs == [[("a", 301, 3), ("a", 301, 3)], [("a", 301, 3)]]


def fk_joined(materialized: Any, inputs_cached: bool = True) -> StreamBuilder:
    """Orders (value: a customer number) joined with customers by that number; the two input
    tables' stores are named, and cached unless `inputs_cached` is False."""

    def store(name: str) -> Any:
        return name if inputs_cached else stores.key_value(name).with_caching_disabled()

    b = StreamBuilder()
    orders = b.table("orders", "str", "long", store=store("o"))
    customers = b.table("customers", "str", "long", store=store("c"))
    result = orders.left_join(
        customers,
        lambda o: f"c{o % 3}",
        lambda o, c: o * 1000 + (c or 0),
        materialized=materialized,
    )
    result.to_stream().to("out", "str", "long")
    return b


def fk_events(n: int) -> Feed:
    out: list[tuple[str, str, int | None, int]] = []
    for i in range(n):
        out.append(("orders", f"o{i % 4}", None if i % 9 == 8 else i % 7, 1000 + 2 * i))
        if i % 3 == 0:
            out.append(("customers", f"c{i % 3 + (i // 3) % 3}", i, 1001 + 2 * i))
    return out


@pytest.mark.parametrize("commit_every", [1, 6])
def test_a_materialized_foreign_key_join_coalesces_and_ends_equal(
    pipelines: list[Pipeline], tmp_path: Path, commit_every: int
) -> None:
    off, on = compare(
        lambda: fk_joined("fk"), tmp_path, pipelines, fk_events(40), commit_every, False
    )
    if commit_every > 1:
        assert len(on) < len(off)
    assert isinstance(pipelines[-1].store("fk"), CachingStore)


def test_an_unmaterialized_foreign_key_join_forwards_every_result(
    pipelines: list[Pipeline], tmp_path: Path
) -> None:
    """Without `materialized=` (and no operator below asking for its values) the result's
    store is kstream's alone, where Kafka has none: every result is forwarded, as with the
    cache off, where the materialized result forwards each key's latest one per commit."""
    events = fk_events(40)
    off = Pipeline(fk_joined(None, inputs_cached=False), tmp_path / "off", 0)
    plain = Pipeline(fk_joined(None, inputs_cached=False), tmp_path / "plain", ON)
    kept = Pipeline(fk_joined("fk", inputs_cached=False), tmp_path / "kept", ON)
    pipelines += [off, plain, kept]
    every = run(off, events, 6)
    assert run(plain, events, 6) == every
    coalesced = run(kept, events, 6)
    assert live(every) == live(coalesced)
    assert len(coalesced) < len(every)
    every_of = per_key(every)
    for key, updates in per_key(coalesced).items():
        assert is_subsequence(updates, every_of[key]), key


def unnamed_source(demand: str) -> StreamBuilder:
    """A source table without a store name, its updates to "out", and `demand`: what else
    reads it."""
    b = StreamBuilder()
    if demand == "to_table":  # `to_table` without a store name, read by nothing else
        table = b.stream("in", "str", "long").to_table()
    else:
        table = b.table("in", "str", "long")
    table.to_stream().to("out", "str", "long")
    if demand == "stream_join":
        b.stream("s", "str", "long").join(table, lambda a, c: a + c).to("joined", "str", "long")
    elif demand == "group_by":
        grouped = table.group_by(lambda k, v: ("all", v), "str", "long")
        grouped.reduce(lambda a, v: a + v, lambda a, v: a - v).to_stream().to("sum", "str", "long")
    elif demand == "filter_then_table_join":
        table.filter(lambda k, v: v > 0).join(table, lambda a, c: a + c).to_stream().to(
            "joined", "str", "long"
        )
    return b


@pytest.mark.parametrize(
    ("demand", "cached"),
    [
        ("none", False),
        ("to_table", False),
        ("stream_join", True),
        ("group_by", True),
        ("filter_then_table_join", True),
    ],
)
def test_an_unnamed_source_table_caches_when_kafka_materializes_it_on_demand(
    pipelines: list[Pipeline], tmp_path: Path, demand: str, cached: bool
) -> None:
    """Kafka's source table without a store name has no store, so no cache, until an operator
    reads it through a value getter (a join) or forces old values (a group_by)."""
    events: Feed = [("in", "a", 1, 1), ("in", "a", 2, 2), ("in", "b", 3, 3), ("in", "a", 4, 4)]
    off, on = compare(lambda: unnamed_source(demand), tmp_path, pipelines, events, 4)
    assert off == [("a", 1, 1), ("a", 2, 2), ("b", 3, 3), ("a", 4, 4)]
    assert on == ([("a", 4, 4), ("b", 3, 3)] if cached else off)
