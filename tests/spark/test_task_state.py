"""The per-key layout of a task's stores in Spark's state (`kstream.spark.task_state`).

Each batch opens the typed stores afresh over a `MapBackend` (the same map and directories,
as a task does per micro-batch), and every read is compared with the same store over the
in-memory reference backend. No Spark needed: `DictMap` stands in for a `MapState`. Every test
runs with the map as it is and with the user keys in hash buckets (`BucketedMap`, as tasks
keep them), where counts of reads differ.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from kstream.records import Windowed
from kstream.spark.buckets import BucketedMap
from kstream.spark.task_state import DATA_TAG, PAGE, DictMap, MapBackend
from kstream.state import StoreSpec, open_store
from kstream.state.keys import esc
from kstream.state.window import TimestampedSerde
from store_backends.memory import MemoryBackend


@pytest.fixture(autouse=True, params=["per-key", "bucketed"])
def layout(request: Any) -> Any:
    Twin.bucketed = request.param == "bucketed"
    yield request.param
    Twin.bucketed = False


class Twin:
    """A store over `MapBackend` (reopened per batch) next to one over `MemoryBackend`."""

    bucketed = False

    def __init__(self, spec: StoreSpec, value_serde: Any = None) -> None:
        self.spec = spec
        self.map = DictMap()
        self.dirs: dict[bytes, list[int]] = {}
        self.ref = open_store(spec, app_id="", partition=0, state_dir="", backend=MemoryBackend())
        if value_serde is not None:
            self.ref.value_serde = value_serde
        self.value_serde = value_serde
        self.store: Any = None
        self.backend: MapBackend | None = None
        self.layout: dict[str, int] = {}

    def begin(self) -> Any:
        state: Any = self.map
        if self.bucketed:
            state = BucketedMap(self.map, self.layout, DATA_TAG)
        self.backend = MapBackend(self.spec.name, self.spec.kind, state, self.dirs)
        self.store = open_store(
            self.spec, app_id="", partition=0, state_dir="", backend=self.backend
        )
        return self.store

    def data_keys(self) -> list[bytes]:
        """The user keys' entries in the map (inside the buckets when bucketed)."""
        if not self.bucketed:
            return [k for k in self.map.data if k[:1] == DATA_TAG]
        return [
            k for k, _ in BucketedMap(self.map, self.layout, DATA_TAG).items() if k[:1] == DATA_TAG
        ]

    def reads_of(self, keys: list[bytes]) -> int:
        """Entries read for the user keys `keys`: one per key, or per bucket."""
        if not self.bucketed:
            return len(set(keys))
        buckets = BucketedMap(self.map, self.layout, DATA_TAG)
        return len({buckets.bucket_of(DATA_TAG + k) for k in keys})

    def end(self) -> None:
        assert self.backend is not None
        self.store.flush()
        self.ref.flush()
        self.backend.sync()


def _window_spec(retention: int = 40, interval: int = 10, dups: bool = False) -> StoreSpec:
    return StoreSpec(
        "w",
        kind="window",
        retention=retention,
        window_size=5,
        segment_interval=interval,
        retain_duplicates=dups,
        value_serde=TimestampedSerde(_int_serde()) if not dups else None,
    )


def _int_serde() -> Any:
    from kstream.serde import BUILTIN

    return BUILTIN["auto"]


def test_window_store_reads_match_the_reference_across_batches() -> None:
    rng = random.Random(7)
    twin = Twin(_window_spec())
    keys = [f"k{i}" for i in range(30)] + ["", "a\x00b", "a"]
    t = 0
    for _batch in range(40):
        s = twin.begin()
        for _ in range(25):
            t += rng.choice([0, 0, 1, 2])
            k = rng.choice(keys)
            start = max(0, t - rng.randrange(0, 30))
            op = rng.random()
            if op < 0.5:
                v = rng.randrange(1000)
                s.put_timestamped(k, v, t, start)
                twin.ref.put_timestamped(k, v, t, start)
            elif op < 0.6:
                s.put(k, None, start)
                twin.ref.put(k, None, start)
            elif op < 0.8:
                lo = start - 10
                assert s.fetch_timestamped(k, lo, start) == twin.ref.fetch_timestamped(k, lo, start)
            elif op < 0.9:
                lo = max(0, t - 25)
                got = s.fetch_all_timestamped(lo, t)
                assert got == twin.ref.fetch_all_timestamped(lo, t)
            else:
                assert s.get_timestamped(k, start) == twin.ref.get_timestamped(k, start)
        twin.end()
    s = twin.begin()
    with s.all() as a, twin.ref.all() as b:
        assert list(a) == list(b)
    assert len(list(twin.ref.all())) > 0


def test_expired_window_segments_leave_the_state_with_their_directories() -> None:
    twin = Twin(_window_spec(retention=20, interval=10))
    s = twin.begin()
    for i in range(50):
        s.put_timestamped(f"k{i}", i, 5, 5)
    twin.end()
    assert list(twin.dirs) != []
    s = twin.begin()
    s.put_timestamped("late", 1, 100, 100)  # stream time moves past the old segments' retention
    twin.end()
    s = twin.begin()
    s.put_timestamped("late", 2, 101, 100)  # the next flush purges the expired segments
    twin.end()
    assert len(twin.data_keys()) == 1  # only the key "late" is left
    assert len(twin.dirs) == 1  # only the segment of "late" is listed
    assert not any(k[:1] == b"d" and k[1:9] < min(twin.dirs) for k in twin.map.data)


def test_a_fetch_reads_one_entry_whatever_the_store_size() -> None:
    twin = Twin(_window_spec(retention=10_000, interval=1000))
    s = twin.begin()
    for i in range(5000):
        s.put_timestamped(i, i, i % 900, i % 900)
    twin.end()
    twin.map.reads = twin.map.writes = 0
    s = twin.begin()
    for i in (3, 77, 4999):
        assert [w[1] for w in s.fetch_timestamped(i, 0, 1000)] == [i]
        s.put_timestamped(i, -i, 950, 950)
    twin.end()
    # a read per key (plus the metadata entry), a write per key plus the directory's last page
    assert twin.map.reads <= 3 + 1 + 1
    assert twin.map.writes <= 3 + 1
    assert len(twin.data_keys()) == 5000


def test_directory_pages_fill_up_and_list_every_key() -> None:
    twin = Twin(_window_spec(retention=100_000, interval=100_000))
    n = PAGE + PAGE // 2 + 3
    for batch in range(3):
        s = twin.begin()
        for i in range(batch * n // 3, (batch + 1) * n // 3):
            s.put_timestamped(i, i, 1, 1)
        twin.end()
    ((pages, last),) = twin.dirs.values()
    assert (pages, last) == (2, n - PAGE)
    s = twin.begin()
    assert len(s.fetch_all_timestamped(0, 10)) == n


def test_retained_duplicates_keep_every_record() -> None:
    twin = Twin(_window_spec(retention=100, interval=50, dups=True))
    for batch in range(4):
        s = twin.begin()
        for i in range(5):
            s.put("k", (batch, i), 10 * batch)
            twin.ref.put("k", (batch, i), 10 * batch)
        twin.end()
    s = twin.begin()
    with s.fetch("k", 0, 100) as a, twin.ref.fetch("k", 0, 100) as b:
        assert list(a) == list(b)
    assert len(list(twin.ref.fetch("k", 0, 100))) == 20


def test_session_store_matches_the_reference() -> None:
    rng = random.Random(3)
    twin = Twin(StoreSpec("s", kind="session", retention=30, segment_interval=10))
    t = 0
    for _batch in range(30):
        s = twin.begin()
        for _ in range(20):
            t += rng.choice([0, 1, 2])
            k = rng.choice("abcdef")
            ref = twin.ref
            with s.find_sessions(k, t - 5, t + 5) as a, ref.find_sessions(k, t - 5, t + 5) as b:
                found, expected = list(a), list(b)
            assert found == expected
            w = Windowed(k, min([t] + [x.start for x, _ in found]), t)
            for x, _ in found:
                s.remove(x)
                twin.ref.remove(x)
            s.put(w, len(found))
            twin.ref.put(w, len(found))
        twin.end()
    s = twin.begin()
    with s.all() as a, twin.ref.all() as b:
        assert list(a) == list(b)


def test_dedup_store_matches_the_reference() -> None:
    rng = random.Random(5)
    twin = Twin(StoreSpec("d", kind="dedup", retention=20, segment_interval=10))
    t = 0
    for _batch in range(30):
        s = twin.begin()
        for _ in range(20):
            t += rng.choice([0, 1, 2])
            i = rng.randrange(40)
            assert s.check_and_mark(i, t) == twin.ref.check_and_mark(i, t)
        twin.end()
    assert len(twin.dirs) <= 4  # expired segments went


def test_key_value_store_points_and_ranges() -> None:
    rng = random.Random(11)
    twin = Twin(StoreSpec("kv"))
    for _batch in range(20):
        s = twin.begin()
        for _ in range(30):
            k = rng.randrange(50)
            if rng.random() < 0.7:
                s.put(k, k * 2)
                twin.ref.put(k, k * 2)
            else:
                s.delete(k)
                twin.ref.delete(k)
            assert s.get(k) == twin.ref.get(k)
        with s.range(10, 30) as a, twin.ref.range(10, 30) as b:
            assert list(a) == list(b)
        twin.end()
    s = twin.begin()
    with s.all() as a, twin.ref.all() as b:
        assert list(a) == list(b)


def test_a_prefetched_batch_reads_in_one_round_and_writes_in_one() -> None:
    twin = Twin(_window_spec(retention=10_000, interval=1000))
    s = twin.begin()
    for i in range(300):
        s.put_timestamped(f"u{i}", i, i, i)
    twin.end()
    twin.map.reads = twin.map.writes = twin.map.rounds = 0
    s = twin.begin()
    assert twin.backend is not None
    ser = s.key_serde.to_bytes  # the records' keys, as the store encodes them
    keys = [ser(f"u{i}") for i in range(0, 300, 2)] + [ser("new")]
    opening = twin.map.reads  # the store reads its segment metadata when it opens
    twin.backend.prefetch(keys + keys[:5])  # repeats are read once
    reads_before = twin.map.reads
    wanted = [esc(k) for k in keys]
    assert (twin.map.rounds, reads_before - opening) == (1, twin.reads_of(wanted))
    for i in range(0, 300, 2):
        assert [w[1] for w in s.fetch_timestamped(f"u{i}", 0, 10_000)] == [i]
        s.put_timestamped(f"u{i}", -i, 999, 999)
    s.put_timestamped("new", 7, 999, 999)
    twin.end()
    assert twin.map.reads - reads_before <= 2  # the segment metadata, the directory's last page
    assert twin.map.rounds == 2  # the prefetch, and one write of everything
    assert not twin.backend.prefetch_missed()
    s = twin.begin()
    assert [w[1] for w in s.fetch_timestamped("u4", 0, 10_000)] == [4, -4]
    assert [w[1] for w in s.fetch_timestamped("new", 0, 10_000)] == [7]


def test_prefetch_missed_tells_a_store_keyed_by_something_else() -> None:
    twin = Twin(_window_spec())
    s = twin.begin()
    assert twin.backend is not None
    twin.backend.prefetch([s.key_serde.to_bytes(f"record-key-{i}") for i in range(40)])
    for i in range(40):
        s.put_timestamped(f"store-key-{i}", i, 5, 5)
    twin.end()
    assert twin.backend.prefetch_missed()
    s = twin.begin()
    assert len(s.fetch_all_timestamped(0, 10)) == 40  # nothing of the guessed keys was written
    assert [w[1] for w in s.fetch_timestamped("store-key-3", 0, 10)] == [3]


def test_expiring_a_segment_reads_its_keys_in_one_round() -> None:
    twin = Twin(_window_spec(retention=20, interval=10))
    s = twin.begin()
    for i in range(500):
        s.put_timestamped(f"k{i}", i, 5, 5)
    twin.end()
    twin.map.reads = twin.map.single_reads = 0
    for t in (100, 101):  # stream time moves past the old segment's retention: it is purged
        s = twin.begin()
        s.put_timestamped("late", t, t, 100)
        twin.end()
    assert twin.data_keys() == [b"g" + esc(s.key_serde.to_bytes("late"))]
    listed = [esc(s.key_serde.to_bytes(f"k{i}")) for i in range(500)]
    assert twin.map.reads >= twin.reads_of(listed)  # every key listed in the directory was read...
    assert twin.map.single_reads <= 10  # ...together (one by one: metadata, pages, "late")


def test_versioned_store_matches_the_reference_across_batches() -> None:
    """A versioned store's keys each in one entry (latest version and history together): puts
    in and out of order, deletes, reads as of any time, history leaving with its segments."""
    from kstream import stores

    rng = random.Random(13)
    spec = stores.versioned_key_value("v", history_retention=30, segment_interval=10)
    twin = Twin(spec)
    keys = ["a", "b", "c\x00d", "", "e"]
    t = 0
    for _batch in range(40):
        s = twin.begin()
        for _ in range(15):
            t += rng.choice([0, 1, 2])
            k = rng.choice(keys)
            at = max(0, t - rng.randrange(0, 40))
            op = rng.random()
            if op < 0.5:
                v = rng.randrange(1000)
                assert s.put(k, v, at) == twin.ref.put(k, v, at)
            elif op < 0.6:
                assert s.delete(k, at) == twin.ref.delete(k, at)
            elif op < 0.8:
                assert s.get(k, at) == twin.ref.get(k, at)
            elif op < 0.9:
                assert s.get(k) == twin.ref.get(k)
            else:
                assert s.versions(k, at - 10, at) == twin.ref.versions(k, at - 10, at)
        twin.end()
    assert len(twin.dirs) <= 6  # expired segments went (the latest versions' one stays)


def test_a_versioned_read_reads_one_entry_whatever_the_store_size() -> None:
    from kstream import stores

    twin = Twin(stores.versioned_key_value("v", history_retention=1000, segment_interval=100))
    s = twin.begin()
    for i in range(2000):
        for t in (10, 20, 30):  # a history of three versions each
            s.put(i, i * t, t)
    twin.end()
    twin.map.reads = 0
    s = twin.begin()
    assert [s.get(i, 15).value for i in (3, 77, 1999)] == [30, 770, 19990]
    assert s.get(5).value == 150
    assert twin.map.reads <= 4 + 1  # one entry per key (plus the segment metadata)


def test_a_key_value_range_reads_the_store_once_per_batch() -> None:
    """A buffer scanned for every record (a stream-table join's grace buffer) reads the
    store's map once per batch, not once per scan."""
    twin = Twin(StoreSpec("kv"))
    s = twin.begin()
    for i in range(200):
        s.put(i, i)
    twin.end()
    twin.map.reads = 0
    s = twin.begin()
    for i in range(50):
        with s.range(i, i + 10) as cur:
            assert [v for _, v in cur] == list(range(i, i + 11))
        s.put(1000 + i, i)
    with s.range(1000, 2000) as cur:
        assert len(list(cur)) == 50
    assert twin.map.reads == 1
    twin.end()
