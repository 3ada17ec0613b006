"""The record cache (`cache_max_bytes`, kstream.state.caching): coalescing, eviction, flushes,
old values, timestamps, deletes, per-store opt-out, rollback, and the changelog timestamps.

A topology runs in `Task`s as the runtime runs it, each store inside the caching layer when the
cache is on; "a commit" is what the runtime does at one: flush the record caches, then apply
the write caches. Outputs with the cache on are compared with the same input run with it off:
the final table is the same, and each key's outputs are a subsequence of the uncached ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.dsl.windows import TimeWindows
from kstream.errors import ConfigError
from kstream.records import Record
from kstream.serde import serde
from kstream.state import open_store
from kstream.state.caching import ENTRY_OVERHEAD, CachingStore, RecordCache, cached
from kstream.state.changelog import ChangeLoggingStore
from kstream.state.spec import StoreSpec
from kstream.stores import key_value
from kstream.topology.task import Task

STR, LONG = serde("str"), serde("long")


class Sent:
    """The records sinks produced: (topic, key bytes, value bytes, timestamp)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None, int]] = []

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Any,
        partition: int | None,
    ) -> None:
        self.records.append((topic, key, value, timestamp))

    def partitions_for(self, topic: str) -> int:
        return 1


class Run:
    """One sub-topology in one task, its stores cached with a budget of `cache_bytes`."""

    def __init__(self, builder: StreamBuilder, tmp: Path, cache_bytes: int) -> None:
        compiled = builder.build().compile("app")
        compiled.resolve_partitions({t: 1 for t in compiled.external_source_topics})
        assert len(compiled.subtopologies) == 1
        self.cache = RecordCache(cache_bytes)
        self.sent = Sent()
        self.offset = 0

        def opener(spec: StoreSpec, part: int) -> Any:
            store = open_store(spec, app_id="app", partition=part, state_dir=str(tmp))
            return cached(store, self.cache)

        self.task = Task(compiled, 0, 0, collector=self.sent, open_store=opener)

    def pipe(self, topic: str, key: str, value: Any, ts: int, vs: Any = LONG) -> None:
        r = Record(STR.to_bytes(key), vs.to_bytes(value), ts, (), topic, 0, self.offset)
        self.offset += 1
        self.task.process([r])

    def commit(self) -> None:
        self.task.flush_caches()
        self.task.flush_stores()

    def rollback(self) -> None:
        self.task.discard()

    def out(self, topic: str = "out") -> list[tuple[str, int | None, int]]:
        return [
            (STR.from_bytes(k), None if v is None else LONG.from_bytes(v), ts)
            for t, k, v, ts in self.sent.records
            if t == topic
        ]

    def close(self) -> None:
        self.task.close()


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for r in made:
        r.close()


def counting(store: Any = "counts") -> StreamBuilder:
    b = StreamBuilder()
    counts = b.stream("in", "str", "long").group_by_key().count(store=store)
    counts.to_stream().to("out", "str", "long")
    return b


def summing() -> StreamBuilder:
    b = StreamBuilder()
    sums = b.stream("in", "str", "long").group_by_key().reduce(lambda a, v: a + v, store="sums")
    sums.to_stream().to("out", "str", "long")
    return b


def feed(run: Run, events: Sequence[tuple[str, int, int]], commit_every: int) -> None:
    for i, (k, v, ts) in enumerate(events, 1):
        run.pipe("in", k, v, ts)
        if i % commit_every == 0:
            run.commit()
    run.commit()


def final(outputs: list[tuple[str, int | None, int]]) -> dict[str, int | None]:
    table: dict[str, int | None] = {}
    for k, v, _ in outputs:
        table[k] = v
    return table


def is_subsequence(small: list[Any], big: list[Any]) -> bool:
    it = iter(big)
    return all(any(x == y for y in it) for x in small)


def per_key(outputs: list[tuple[str, int | None, int]]) -> dict[str, list[tuple[int | None, int]]]:
    by: dict[str, list[tuple[int | None, int]]] = {}
    for k, v, ts in outputs:
        by.setdefault(k, []).append((v, ts))
    return by


EVENTS = [("a", 1, 10), ("a", 2, 20), ("b", 5, 15), ("a", 3, 30), ("c", 1, 5), ("b", 1, 40)]


def test_updates_of_a_key_between_commits_are_forwarded_once(
    runs: list[Run], tmp_path: Path
) -> None:
    off = Run(summing(), tmp_path / "off", 0)
    on = Run(summing(), tmp_path / "on", 10_000_000)
    runs += [off, on]
    feed(off, EVENTS, commit_every=len(EVENTS))
    feed(on, EVENTS, commit_every=len(EVENTS))
    assert off.out() == [
        ("a", 1, 10), ("a", 3, 20), ("b", 5, 15), ("a", 6, 30), ("c", 1, 5), ("b", 6, 40)
    ]  # fmt: skip
    # one update per key, in the order the keys became dirty, each with its last update's time
    assert on.out() == [("a", 6, 30), ("b", 6, 40), ("c", 1, 5)]
    assert final(on.out()) == final(off.out())


def test_nothing_is_forwarded_before_the_commit(runs: list[Run], tmp_path: Path) -> None:
    on = Run(counting(), tmp_path, 10_000_000)
    runs.append(on)
    for k, v, ts in EVENTS:
        on.pipe("in", k, v, ts)
    assert on.out() == []
    store = on.task.stores["counts"]
    assert isinstance(store, CachingStore) and store.dirty_count() == 3
    assert store.get("a") == 3  # reads see the latest value at once
    on.commit()
    assert on.out() == [("a", 3, 30), ("b", 2, 40), ("c", 1, 5)]
    assert store.dirty_count() == 0


@pytest.mark.parametrize("commit_every", [1, 2, 3, 5])
@pytest.mark.parametrize("cache_bytes", [1, 200, 400, 10_000_000])
def test_outputs_are_a_subsequence_of_the_uncached_ones_and_end_equal(
    runs: list[Run], tmp_path: Path, commit_every: int, cache_bytes: int
) -> None:
    events = [(f"k{(i // 2) % 3}", i % 4 + 1, 1000 + i) for i in range(60)]  # keys in pairs
    off = Run(summing(), tmp_path / "off", 0)
    on = Run(summing(), tmp_path / "on", cache_bytes)
    runs += [off, on]
    feed(off, events, commit_every)
    feed(on, events, commit_every)
    assert final(on.out()) == final(off.out())
    uncached = per_key(off.out())
    for key, updates in per_key(on.out()).items():
        assert is_subsequence(updates, uncached[key]), key
    if commit_every > 1 and cache_bytes > 1:
        assert len(on.out()) < len(off.out())
    if commit_every == 1 or cache_bytes == 1:  # nothing to coalesce, or nothing fits
        assert on.out() == off.out()


def entry_size(key: str, value_bytes: int) -> int:
    """The cache's size of one count entry: key, 8-byte timestamp + value, overhead."""
    return len(STR.to_bytes(key)) + 8 + value_bytes + ENTRY_OVERHEAD


def test_eviction_flushes_the_stores_dirty_entries_oldest_first(
    runs: list[Run], tmp_path: Path
) -> None:
    one = entry_size("a", 8)
    on = Run(counting(), tmp_path, 2 * one)  # room for two entries
    runs.append(on)
    on.pipe("in", "a", 0, 1)
    on.pipe("in", "b", 0, 2)
    on.pipe("in", "a", 0, 3)  # a is now the most recently written
    assert on.out() == []
    on.pipe("in", "c", 0, 4)  # over budget: evicts b, the least recently written
    # the eviction flushes every dirty entry of the store (c's too, as Kafka's does): the
    # evicted one first, then the others in the order they became dirty
    assert on.out() == [("b", 1, 2), ("a", 2, 3), ("c", 1, 4)]
    store = on.task.stores["counts"]
    assert store.dirty_count() == 0
    assert on.cache.evictions == 1 and on.cache.size == 2 * one  # a and c stay, clean
    on.pipe("in", "a", 0, 5)  # a's clean entry is dirty again, its old value 2
    assert store.dirty_count() == 1 and on.out()[3:] == []
    on.pipe("in", "d", 0, 6)  # over budget: evicts c, which is clean and forwards nothing
    assert on.cache.evictions == 2 and on.out()[3:] == []
    on.commit()
    assert on.out()[3:] == [("a", 3, 5), ("d", 1, 6)]


def test_an_entry_larger_than_the_cache_is_forwarded_at_once(
    runs: list[Run], tmp_path: Path
) -> None:
    on = Run(counting(), tmp_path, 10)
    runs.append(on)
    on.pipe("in", "a", 0, 1)
    on.pipe("in", "a", 0, 2)
    assert on.out() == [("a", 1, 1), ("a", 2, 2)]


def test_old_values_are_the_values_before_the_first_update_since_the_last_flush(
    tmp_path: Path,
) -> None:
    spec = key_value("kv", key_serde="str", value_serde="long")
    inner = open_store(spec, app_id="app", partition=0, state_dir=str(tmp_path))
    store = cached(inner, RecordCache(1_000_000))
    assert isinstance(store, CachingStore) and isinstance(store.inner, ChangeLoggingStore)
    flushed: list[tuple[Any, Any, Any, int]] = []

    def listener(entries: list[tuple[Record, Any]]) -> None:
        flushed.extend((r.key, r.value[0], old, r.timestamp) for r, old in entries)

    assert store.set_flush_listener(listener)

    def update(key: str, value: int | None, ts: int) -> None:
        old = store.get(key)
        store.put(key, value)
        store.cache_update(Record(key, (value, old), ts))

    update("x", 1, 10)
    update("x", 2, 11)
    store.flush_cache()
    assert flushed == [("x", 2, None, 11)]  # a new key: no old value
    update("x", 3, 12)
    update("x", 4, 13)
    store.flush_cache()
    assert flushed[1:] == [("x", 4, 2, 13)]  # the value flushed before, not 3
    # deletes: a key created and deleted between flushes forwards nothing; a key that existed
    # forwards its delete with the value it had
    update("y", 7, 20)
    update("y", None, 21)
    update("x", None, 22)
    store.flush_cache()
    assert flushed[2:] == [("x", None, 4, 22)]
    assert store.get("x") is None and store.get("y") is None
    store.close()


def test_a_store_with_caching_disabled_forwards_every_update(
    runs: list[Run], tmp_path: Path
) -> None:
    spec = key_value("counts").with_caching_disabled()
    assert not spec.caching and spec.with_caching_enabled().caching
    on = Run(counting(spec), tmp_path / "on", 10_000_000)
    off = Run(counting(), tmp_path / "off", 0)
    runs += [on, off]
    feed(on, EVENTS, commit_every=len(EVENTS))
    feed(off, EVENTS, commit_every=len(EVENTS))
    assert not isinstance(on.task.stores["counts"], CachingStore)
    assert on.out() == off.out() and len(on.out()) == len(EVENTS)


def test_an_unnamed_source_table_forwards_every_update_a_named_one_is_cached(
    runs: list[Run], tmp_path: Path
) -> None:
    def table(store: str | None) -> StreamBuilder:
        b = StreamBuilder()
        b.table("in", "str", "long", store=store).to_stream().to("out", "str", "long")
        return b

    named = Run(table("t"), tmp_path / "named", 10_000_000)
    unnamed = Run(table(None), tmp_path / "unnamed", 10_000_000)
    runs += [named, unnamed]
    for r in (named, unnamed):
        r.pipe("in", "a", 1, 1)
        r.pipe("in", "a", 2, 2)
        r.commit()
    assert named.out() == [("a", 2, 2)]
    assert unnamed.out() == [("a", 1, 1), ("a", 2, 2)]


def test_a_rollback_drops_what_the_cache_held_back(runs: list[Run], tmp_path: Path) -> None:
    on = Run(counting(), tmp_path, 10_000_000)
    runs.append(on)
    on.pipe("in", "a", 0, 1)
    on.commit()
    on.pipe("in", "a", 0, 2)
    on.pipe("in", "b", 0, 3)
    on.rollback()
    assert on.cache.size == 0  # what the cache held is dropped with the pending writes
    on.pipe("in", "a", 0, 2)
    on.commit()
    assert on.out() == [("a", 1, 1), ("a", 2, 2)]


def test_windowed_updates_are_coalesced_per_window(runs: list[Run], tmp_path: Path) -> None:
    def windowed() -> StreamBuilder:
        b = StreamBuilder()
        counts = (
            b.stream("in", "str", "long").group_by_key().windowed_by(TimeWindows.of(10, grace=100))
        )
        counts.count(store="w").to_stream(lambda w, n: f"{w.key}@{w.start}").to(
            "out", "str", "long"
        )
        return b

    events = [("a", 0, 1), ("a", 0, 5), ("a", 0, 12), ("b", 0, 3), ("a", 0, 7), ("a", 0, 14)]
    off = Run(windowed(), tmp_path / "off", 0)
    on = Run(windowed(), tmp_path / "on", 10_000_000)
    runs += [off, on]
    feed(off, events, commit_every=len(events))
    feed(on, events, commit_every=len(events))
    assert on.out() == [("a@0", 3, 7), ("a@10", 2, 14), ("b@0", 1, 3)]
    assert final(on.out()) == final(off.out())
    assert len(off.out()) == len(events)


def test_changelog_records_carry_the_time_of_the_write(tmp_path: Path) -> None:
    plain = open_store(
        key_value("plain", key_serde="str", value_serde="long"),
        app_id="app",
        partition=0,
        state_dir=str(tmp_path),
    )
    now = [100]
    plain.context = SimpleNamespace(current=None, record_time=lambda: now[0])  # a punctuation
    plain.put("a", 1)
    now[0] = 250
    plain.put("b", 2)
    plain.put("a", 3)  # the last write of a key decides
    assert {r.key: r.timestamp for r in plain.changelog_records("app")} == {
        b"a": 250,
        b"b": 250,
    }
    plain.close()


def test_an_aggregates_changelog_record_carries_the_aggregates_timestamp(
    runs: list[Run], tmp_path: Path
) -> None:
    run = Run(counting(), tmp_path, 0)
    runs.append(run)
    run.pipe("in", "a", 0, 50)
    run.pipe("in", "a", 0, 20)  # out of order: the count keeps the larger time, 50
    run.pipe("in", "b", 0, 30)
    records = run.task.stores["counts"].changelog_records("app")
    assert {r.key: r.timestamp for r in records} == {b"a": 50, b"b": 30}


def test_cache_max_bytes_is_validated_at_start_up() -> None:
    assert Config().cache_max_bytes == 0
    assert Config.from_mapping({"cache_max_bytes": 10_485_760}).cache_max_bytes == 10_485_760
    for bad in (-1, "10MB", 1.5, True, None):
        with pytest.raises(ConfigError, match="cache_max_bytes"):
            Config.from_mapping({"cache_max_bytes": bad})


class Timings:
    """A `StoreMetrics` that counts the operations it is told of."""

    def __init__(self) -> None:
        self.ops: dict[str, int] = {}

    def record_operation(
        self, store: str, partition: int, op: str, seconds: float, count: int = 1
    ) -> None:
        self.ops[op] = self.ops.get(op, 0) + count

    def record_restore(
        self, store: str, partition: int, restored: int, end_offset: int | None
    ) -> None:
        pass


def test_the_cache_works_under_the_metering_layer(tmp_path: Path) -> None:
    """Kafka's chain, Metered(Caching(ChangeLogging(store))): the runtime's at debug level."""
    from kstream.state.metrics import instrument

    timings = Timings()
    compiled = counting().build().compile("app")
    compiled.resolve_partitions({t: 1 for t in compiled.external_source_topics})
    cache, sent = RecordCache(10_000_000), Sent()

    def opener(spec: StoreSpec, part: int) -> Any:
        store = open_store(spec, app_id="app", partition=part, state_dir=str(tmp_path))
        return instrument(cached(store, cache), timings)

    task = Task(compiled, 0, 0, collector=sent, open_store=opener)
    try:
        for i, ts in enumerate((1, 2, 3)):
            task.process([Record(b"a", LONG.to_bytes(0), ts, (), "in", 0, i)])
        assert sent.records == []
        task.flush_caches()
        task.flush_stores()
        assert [(k, LONG.from_bytes(v), ts) for _, k, v, ts in sent.records] == [(b"a", 3, 3)]
        assert timings.ops["get"] == 3 and timings.ops["put"] == 3
    finally:
        task.close()


def test_worker_processes_share_the_record_cache(tmp_path: Path) -> None:
    """`--processes N`: each worker's stream thread gets 1/N, as Kafka divides
    statestore.cache.max.bytes among an instance's stream threads."""
    from kstream.service.settings import Settings
    from kstream.service.supervisor import Supervisor

    def worker_cache(given: int) -> int:
        config = {"state_dir": str(tmp_path), "cache_max_bytes": given}
        sup = Supervisor("mod:topology", Settings(app_id="wc", instance_id="n", config=config), 3)
        cache: int = sup._worker_settings(sup.slots[0], 41000).config["cache_max_bytes"]
        return cache

    assert worker_cache(30_000_000) == 10_000_000
    assert worker_cache(0) == 0


def live(outputs: list[tuple[str, int | None, int]]) -> dict[str, int | None]:
    """The final table without the keys whose last update deleted them."""
    return {k: v for k, v in final(outputs).items() if v is not None}


@pytest.mark.parametrize("kind", ["session", "sliding"])
def test_session_and_sliding_windows_end_with_the_same_table(
    runs: list[Run], tmp_path: Path, kind: str
) -> None:
    from kstream.dsl.windows import SessionWindows, SlidingWindows

    def windowed() -> StreamBuilder:
        b = StreamBuilder()
        grouped = b.stream("in", "str", "long").group_by_key()
        if kind == "session":
            table = grouped.windowed_by(SessionWindows.with_gap(10, grace=1000)).count(store="w")
        else:
            table = grouped.windowed_by(SlidingWindows.of(10, grace=1000)).count(store="w")
        table.to_stream(lambda w, n: f"{w.key}@{w.start}-{w.end}").to("out", "str", "long")
        return b

    # sessions that grow, merge and stay apart; sliding windows that overlap
    events = [("a", 0, t) for t in (1, 5, 30, 12, 22, 60, 3, 61)] + [("b", 0, 2), ("b", 0, 40)]
    off = Run(windowed(), tmp_path / "off", 0)
    on = Run(windowed(), tmp_path / "on", 10_000_000)
    runs += [off, on]
    feed(off, events, commit_every=4)
    feed(on, events, commit_every=4)
    assert live(on.out()) == live(off.out())
    assert len(on.out()) < len(off.out())
    uncached = per_key(off.out())
    for key, updates in per_key(on.out()).items():
        assert is_subsequence(updates, uncached[key]), key
