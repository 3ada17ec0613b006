"""Metric hooks, LRU eviction and the backend registry."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import store_backends
from kstream import stores
from kstream.errors import ConfigError
from kstream.records import Record
from kstream.state import ChangeLoggingStore, KeyValueStore, open_store
from kstream.state.metrics import MeteredStore, instrument
from store_backends.lru import LRUBackend
from store_backends.memory import MemoryBackend


class Recorder:
    def __init__(self) -> None:
        self.ops: list[tuple[str, int, str]] = []
        self.restores: list[tuple[str, int, int, int | None]] = []

    def record_operation(self, store: str, partition: int, op: str, seconds: float) -> None:
        assert seconds >= 0
        self.ops.append((store, partition, op))

    def record_restore(
        self, store: str, partition: int, restored: int, end_offset: int | None
    ) -> None:
        self.restores.append((store, partition, restored, end_offset))


def test_instrumented_store_reports_each_operation(tmp_path: Path) -> None:
    rec = Recorder()
    kv = open_store(stores.key_value("kv"), app_id="a", partition=2, state_dir=str(tmp_path))
    assert isinstance(kv, ChangeLoggingStore) and isinstance(kv.inner, KeyValueStore)
    kv = instrument(kv, rec)
    kv.put("a", 1)
    assert kv.get("a") == 1
    assert list(kv.range("a", "b")) == [("a", 1)]
    kv.flush()
    assert rec.ops == [("kv", 2, "put"), ("kv", 2, "get"), ("kv", 2, "range"), ("kv", 2, "flush")]


def test_metering_is_a_layer_around_the_store_not_a_patch_on_it(tmp_path: Path) -> None:
    """The layer is a new object: the store underneath keeps its own methods, a write through
    the layer still carries the task's provenance (set on the layer), queries go through the
    meter, and a call the store serves with its own calls is counted once, as the caller made
    it (Kafka's metered stores count the same way)."""
    rec = Recorder()
    inner = open_store(stores.key_value("kv"), app_id="a", partition=0, state_dir=str(tmp_path))
    kv = instrument(inner, rec)
    assert isinstance(kv, MeteredStore) and kv.inner is inner
    assert "put" not in vars(inner.inner)
    assert repr(kv) == "Metered(ChangeLogging(KeyValueStore('kv', partition=0)))"
    kv.context = SimpleNamespace(current=Record(None, None, 0, (), "in", 0, 7))
    kv.put("a", 1)
    assert [e.source for e in kv.pending()] == [("in", 0, 7)]
    assert kv.delete("a") == 1
    assert rec.ops == [("kv", 0, "put"), ("kv", 0, "delete")]
    view = kv.read_only()
    assert view.get("a") is None
    assert rec.ops[-1] == ("kv", 0, "get")
    with pytest.raises(AttributeError, match="read-only"):
        view.put("a", 2)
    get, put = kv.timestamped_access()
    put(get("b")[0], 5, 100)
    assert rec.ops[-2:] == [("kv", 0, "get"), ("kv", 0, "put")]


@pytest.mark.parametrize(
    "factory",
    [
        lambda: stores.key_value("s", cache=True),
        lambda: stores.window("s", "1h", "1m", cache=False),
        lambda: stores.session("s", "1h", cache=True),
        lambda: stores.dedup("s", "1h", cache=False),
    ],
)
def test_the_removed_cache_argument_is_refused_by_name(factory: Any) -> None:
    """`cache=` never cached (no store read it): an old caller learns so instead of keeping a
    setting that does nothing."""
    with pytest.raises(ConfigError, match=r"cache= was removed"):
        factory()
    with pytest.raises(TypeError, match="nope"):
        stores.key_value("s", nope=1)


class SampledRecorder:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def record_operation(
        self, store: str, partition: int, op: str, seconds: float, count: int = 1
    ) -> None:
        assert seconds >= 0
        self.counts[op] = self.counts.get(op, 0) + count

    def record_restore(self, *args: object) -> None:
        pass


def test_sampled_wrappers_count_in_steps_and_keep_each_operations_call_forms(
    tmp_path: Path,
) -> None:
    """Operations with plain parameters get a wrapper of the same parameters (no argument
    tuple per call); it takes the same positional and keyword calls, returns the same results
    and counts in steps of `sample_every`, like the generic wrapper of the others."""
    rec = SampledRecorder()
    spec = stores.window("w", retention="1h", window_size="1m")
    ws = open_store(spec, app_id="a", partition=0, state_dir=str(tmp_path))
    ws = instrument(ws, rec, sample_every=4)
    put = ws.put_timestamped  # type: ignore[attr-defined]
    get = ws.get_timestamped  # type: ignore[attr-defined]
    assert put.__name__ == "put_timestamped" and put.__wrapped__ is not None
    for i in range(6):
        put("k", i, 1_000 + i, 0)
        put(key="j", value=i, timestamp=2_000 + i, start=60_000)
    assert get("k", 0) == (5, 1_005)
    assert get(key="j", start=60_000) == (5, 2_005)
    with pytest.raises(TypeError):
        get("k")  # a missing argument is still the caller's error, not the wrapper's
    assert rec.counts["put_timestamped"] == 12  # 12 calls: timed 3 times, each standing for 4
    assert rec.counts.get("get_timestamped", 0) == 0  # 2 calls (+1 refused): not yet sampled
    for _ in range(2):
        get("k", 0)
    assert rec.counts["get_timestamped"] == 4


def test_lru_evicts_least_recently_used_locally() -> None:
    be = LRUBackend(3)
    for k in (b"a", b"b", b"c"):
        be.put(k, k)
    assert be.get(b"a") == b"a"  # refreshes a
    be.put(b"d", b"d")  # evicts b
    assert be.get(b"b") is None
    assert [k for k, _ in be.range()] == [b"a", b"c", b"d"]
    assert be.evictions == 1
    be.write_batch({b"e": b"e", b"f": b"f"}, (), {"o": 1})
    assert [k for k, _ in be.range()] == [b"d", b"e", b"f"]
    assert be.checkpoint() == {"o": 1}


def test_registry_opens_by_url_and_short_name(tmp_path: Path) -> None:
    assert isinstance(store_backends.open("memory"), MemoryBackend)
    lru = store_backends.open("lru://?max_entries=7")
    assert isinstance(lru, LRUBackend) and lru.max_entries == 7
    be = store_backends.open(
        "lmdb://rel", name="s", partition=1, state_dir=str(tmp_path), namespace="app"
    )
    assert be.path == str(tmp_path / "rel" / "app" / "s" / "1")  # type: ignore[attr-defined]
    be.close()
    assert {"memory", "lru", "lmdb", "redis"} <= set(store_backends.schemes())
    with pytest.raises(ConfigError, match="unknown store backend 'nope'"):
        store_backends.open("nope://x")
    with pytest.raises(ConfigError, match="max_entries"):
        store_backends.open("lru://?max_entries=many")


def test_registered_factory_is_used() -> None:
    made: list[str] = []

    def factory(url: str, **kw: object) -> MemoryBackend:
        made.append(url)
        return MemoryBackend()

    store_backends.register("custom-test", factory)
    assert isinstance(store_backends.open("custom-test://x"), MemoryBackend)
    assert made == ["custom-test://x"]
