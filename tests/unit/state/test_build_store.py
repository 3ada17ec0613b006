"""`build_store` (kstream.state.build): the one assembly of a store's chain of layers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kstream.state import ChangeLoggingStore, KeyValueStore, open_store
from kstream.state.build import NO_LAYERS, StoreLayers, build_store
from kstream.state.caching import CachingStore, RecordCache
from kstream.state.metrics import MeteredStore
from kstream.state.spec import StoreSpec


class Recorded:
    """A `StoreMetrics` that keeps what it is told."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, int, str, int]] = []

    def record_operation(
        self, store: str, partition: int, op: str, seconds: float, count: int = 1
    ) -> None:
        self.ops.append((store, partition, op, count))

    def record_restore(
        self, store: str, partition: int, restored: int, end_offset: int | None
    ) -> None:
        pass


def spec(name: str = "counts", *, changelog: bool = True, caching: bool = True) -> StoreSpec:
    return StoreSpec(name=name, kind="key_value", changelog=changelog, caching=caching)


def test_no_layers_is_the_inner_chain_open_store_opens(tmp_path: Path) -> None:
    built = build_store(spec(), partition=3, app_id="app", state_dir=str(tmp_path))
    opened = open_store(spec(), app_id="app", partition=3, state_dir=str(tmp_path))
    assert type(built) is type(opened) is ChangeLoggingStore
    assert type(built.inner) is KeyValueStore
    assert built.partition == 3
    unlogged = build_store(spec(changelog=False), partition=0)
    assert type(unlogged) is KeyValueStore


def test_layers_go_on_in_kafkas_order() -> None:
    metrics = Recorded()
    layers = StoreLayers(record_cache=RecordCache(1000), metrics=metrics)
    store = build_store(spec(), partition=1, layers=layers)
    assert type(store) is MeteredStore
    assert type(store.inner) is CachingStore
    assert type(store.inner.inner) is ChangeLoggingStore
    store.put("k", 1)
    assert store.get("k") == 1
    assert [(s, p, op) for s, p, op, _ in metrics.ops] == [
        ("counts", 1, "put"),
        ("counts", 1, "get"),
    ]


def test_a_disabled_cache_or_a_store_that_cannot_cache_gets_no_caching_layer() -> None:
    off = build_store(spec(), partition=0, layers=StoreLayers(record_cache=RecordCache(0)))
    assert type(off) is ChangeLoggingStore
    no = build_store(
        spec(caching=False), partition=0, layers=StoreLayers(record_cache=RecordCache(1000))
    )
    assert type(no) is ChangeLoggingStore


def test_internal_stores_are_not_metered() -> None:
    metrics = Recorded()
    store = build_store(spec("kstream-marks-0"), partition=0, layers=StoreLayers(metrics=metrics))
    assert type(store) is ChangeLoggingStore
    store.put("k", 1)
    assert metrics.ops == []


def test_a_restored_inner_chain_is_used_as_it_is() -> None:
    inner = build_store(spec(), partition=2)
    inner.put("k", 7)
    layers = StoreLayers(record_cache=RecordCache(1000))
    store = build_store(spec(), partition=2, inner=inner, layers=layers)
    assert store.inner is inner
    assert store.get("k") == 7
    assert build_store(spec(), partition=2, inner=inner, layers=NO_LAYERS) is inner


def test_an_inner_chain_of_another_store_is_refused() -> None:
    inner = build_store(spec("other"), partition=0)
    with pytest.raises(ValueError, match="'counts' partition 0 was given the open store 'other'"):
        build_store(spec(), partition=0, inner=inner)
