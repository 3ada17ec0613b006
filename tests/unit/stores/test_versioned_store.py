"""The versioned key-value store (KIP-889) on the memory, LMDB and Redis backends.

Each case is a port of a case of Kafka's `RocksDBVersionedStoreTest` (named in the test): the
same puts with the same expected return codes, then the same reads with the same expected
versions. History retention 300 s and segment interval 100 s, as there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kstream import stores
from kstream.errors import ConfigError
from kstream.state import open_store
from kstream.state.versioned import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    VersionedKeyValueStore,
    VersionedRecord,
)
from store_backends import Backend

HISTORY_RETENTION = 300_000
SEGMENT_INTERVAL = HISTORY_RETENTION // 3
BASE = 10
SI = SEGMENT_INTERVAL
LATEST = PUT_RETURN_CODE_VALID_TO_UNDEFINED


@pytest.fixture(params=["memory", "lmdb", "redis"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    """Backends that keep every entry (an LRU backend may evict history: not one to use)."""
    kind: str = request.param
    return kind


def _open(backend: Backend) -> Any:
    spec = stores.versioned_key_value(
        "prices", HISTORY_RETENTION, SEGMENT_INTERVAL, key_serde="str", value_serde="str"
    )
    return open_store(spec, app_id="app", partition=3, state_dir="", backend=backend)


@pytest.fixture
def store(open_backend: Callable[[], Backend]) -> Any:
    s = _open(open_backend())
    yield s
    s.close()


def _puts(store: Any, puts: list[tuple[str, str | None, int, int]]) -> None:
    for key, value, ts, expected in puts:
        assert store.put(key, value, ts) == expected, (key, value, ts)


def _version(value: str, ts: int, valid_to: int) -> VersionedRecord:
    return VersionedRecord(value, ts, None if valid_to == LATEST else valid_to)


def test_put_older_with_non_null_latest(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutOlderWithNonNullLatest"""
    _puts(
        store,
        [
            ("k", "v", BASE, LATEST),
            ("k", "v2", BASE - 2, BASE),
            ("k", "v1", BASE - 1, BASE),
            ("k", "v4", BASE - 4, BASE - 2),
        ],
    )
    assert store.get("k") == _version("v", BASE, LATEST)
    assert store.get("k", BASE) == _version("v", BASE, LATEST)
    assert store.get("k", BASE - 1) == _version("v1", BASE - 1, BASE)
    assert store.get("k", BASE - 2) == _version("v2", BASE - 2, BASE - 1)
    assert store.get("k", BASE - 3) == _version("v4", BASE - 4, BASE - 2)


def test_put_older_null_with_non_null_latest(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutOlderNullWithNonNullLatest: tombstones are versions
    (an older put ends where the tombstone it falls in ended)."""
    _puts(
        store,
        [
            ("k", "v", BASE, LATEST),
            ("k", None, BASE - 2, BASE),
            ("k", None, BASE - 1, BASE),
            ("k", None, BASE - 4, BASE - 2),
            ("k", "v5", BASE - 5, BASE - 4),
            ("k", "v3", BASE - 3, BASE - 2),
            ("k", None, BASE - 6, BASE - 5),
        ],
    )
    assert store.get("k", BASE) == _version("v", BASE, LATEST)
    assert store.get("k", BASE - 1) is None
    assert store.get("k", BASE - 2) is None
    assert store.get("k", BASE - 3) == _version("v3", BASE - 3, BASE - 2)
    assert store.get("k", BASE - 4) is None
    assert store.get("k", BASE - 5) == _version("v5", BASE - 5, BASE - 4)
    assert store.get("k", BASE - 6) is None


def test_put_repeat_timestamps(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldPutRepeatTimestamps: a put at an existing version's
    time replaces it, across segments."""
    _puts(
        store,
        [
            ("k", "to_be_replaced", SI + 20, LATEST),
            ("k", None, SI - 10, SI + 20),
            ("k", "to_be_replaced", SI - 10, SI + 20),
            ("k", None, SI - 10, SI + 20),
            ("k", "to_be_replaced", SI - 1, SI + 20),
            ("k", "to_be_replaced", SI + 1, SI + 20),
            ("k", None, SI - 1, SI + 1),
            ("k", None, SI + 1, SI + 20),
            ("k", None, SI + 10, SI + 20),
            ("k", None, SI + 5, SI + 10),
            ("k", "vp5", SI + 5, SI + 10),
            ("k", "to_be_replaced", SI - 5, SI - 1),
            ("k", "vn5", SI - 5, SI - 1),
            ("k", None, SI + 20, LATEST),
            ("k", None, SI + 20, LATEST),
            ("k", "vn6", SI - 6, SI - 5),
        ],
    )
    assert store.get("k") is None
    for t in (SI + 30, SI + 15, SI + 2, SI, SI - 1, SI - 8):
        assert store.get("k", t) is None, t
    assert store.get("k", SI + 6) == _version("vp5", SI + 5, SI + 10)
    assert store.get("k", SI - 5) == _version("vn5", SI - 5, SI - 1)
    assert store.get("k", SI - 6) == _version("vn6", SI - 6, SI - 5)


def test_move_record_to_older_segment_during_put(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldMoveRecordToOlderSegmentDuringPut"""
    _puts(
        store,
        [
            ("k", "vp20", SI + 20, LATEST),
            ("k", "vp10", SI + 10, SI + 20),
            ("k", "vn10", SI - 10, SI + 10),
            ("k", "vn2", SI - 2, SI + 10),
            ("k", "vn1", SI - 1, SI + 10),
            ("k", "vp1", SI + 1, SI + 10),
        ],
    )
    assert store.get("k", SI + 30) == _version("vp20", SI + 20, LATEST)
    assert store.get("k", SI + 15) == _version("vp10", SI + 10, SI + 20)
    assert store.get("k", SI + 5) == _version("vp1", SI + 1, SI + 10)
    assert store.get("k", SI) == _version("vn1", SI - 1, SI + 1)
    assert store.get("k", SI - 2) == _version("vn2", SI - 2, SI - 1)
    assert store.get("k", SI - 5) == _version("vn10", SI - 10, SI - 2)


def test_fall_through_to_existing_older_segment(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldFallThroughToExistingOlderSegmentAsLatestDuringPut"""
    _puts(
        store,
        [
            ("k", None, SI - 5, LATEST),
            ("k", "vn6", SI - 6, SI - 5),
            ("k", "vp20", SI + 20, LATEST),
            ("k", None, SI + 10, SI + 20),
            ("k", None, SI - 1, SI + 10),
            ("k", "vn2", SI - 2, SI - 1),
        ],
    )
    assert store.get("k") == _version("vp20", SI + 20, LATEST)
    for t in (SI + 12, SI, SI - 1, SI - 5):
        assert store.get("k", t) is None, t
    assert store.get("k", SI - 2) == _version("vn2", SI - 2, SI - 1)
    assert store.get("k", SI - 6) == _version("vn6", SI - 6, SI - 5)


def test_delete(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldDelete: delete returns the version it ended."""
    _puts(
        store,
        [
            ("k", "vp20", SI + 20, LATEST),
            ("k", "vp10", SI + 10, SI + 20),
            ("k", "vn10", SI - 10, SI + 10),
            ("k", "vn2", SI - 2, SI + 10),
        ],
    )
    assert store.delete("k", SI - 5) == ("vn10", SI - 10, SI - 2)
    assert store.delete("k", SI + 10) == ("vp10", SI + 10, SI + 20)
    assert store.delete("k", SI + 10) is None
    assert store.delete("k", SI + 25) == ("vp20", SI + 20, None)
    assert store.get("k") is None


def test_not_put_or_delete_expired(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldNotPutExpired and shouldNotDeleteExpired: history
    retention doubles as the grace period of puts."""
    _puts(
        store,
        [
            ("k2", "v2", 1, LATEST),
            ("k", "v", HISTORY_RETENTION + 10, LATEST),
            ("k1", "v1", 10, LATEST),
            ("k3", "v3", 9, PUT_RETURN_CODE_NOT_PUT),
        ],
    )
    assert store.get("k1") == _version("v1", 10, LATEST)
    assert store.get("k3") is None
    assert store.delete("k2", 9) is None
    assert store.get("k2") == _version("v2", 1, LATEST)


def test_not_get_expired_unless_latest(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldNotGetExpired and shouldGetExpiredIfLatestValue"""
    _puts(store, [("k", "v_old", 0, LATEST), ("k", "v", SI - 10, LATEST)])
    assert store.get("k", SI - 11) == _version("v_old", 0, SI - 10)
    store.put("ko", "vo", HISTORY_RETENTION + SI - 11)
    assert store.get("k", SI - 11) == _version("v_old", 0, SI - 10)
    store.put("ko", "vo2", HISTORY_RETENTION + SI - 10)
    assert store.get("k", SI - 11) is None
    # the latest version never expires
    assert store.get("k", SI - 5) == _version("v", SI - 10, LATEST)


def test_empty_value_is_not_a_tombstone(store: Any) -> None:
    """RocksDBVersionedStoreTest.shouldDistinguishEmptyAndNull"""
    _puts(
        store,
        [
            ("k", None, SI + 20, LATEST),
            ("k", None, SI - 10, SI + 20),
            ("k", None, SI - 1, SI + 20),
            ("k", None, SI + 1, SI + 20),
            ("k", None, SI + 10, SI + 20),
            ("k", "", SI + 5, SI + 10),
            ("k", "", SI - 5, SI - 1),
            ("k", "", SI - 6, SI - 5),
        ],
    )
    assert store.get("k", SI + 6) == _version("", SI + 5, SI + 10)
    assert store.get("k", SI - 5) == _version("", SI - 5, SI - 1)
    assert store.get("k", SI - 6) == _version("", SI - 6, SI - 5)
    assert store.get("k", SI + 2) is None
    assert store.get("k", SI - 8) is None


def test_history_survives_flush_reopen_and_expires_by_segment(
    open_backend: Callable[[], Backend], backend_kind: str
) -> None:
    """Committed history is read back by a reopened store (a persistent backend's); once out
    of retention its segment is purged at a flush (the latest version stays)."""
    s = _open(open_backend())
    _puts(s, [("k", "a", 0, LATEST), ("k", "b", SI - 10, LATEST), ("k", "c", SI + 5, LATEST)])
    s.flush()
    if backend_kind != "memory":  # a memory backend lives as long as its store
        s.close()
        s = _open(open_backend())
    assert s.get("k", SI - 20) == _version("a", 0, SI - 10)
    assert s.get("k", SI) == _version("b", SI - 10, SI + 5)
    s.put("other", "x", HISTORY_RETENTION + 2 * SI)  # stream time moves: segment 0 expires
    s.flush()
    assert s.get("k", SI - 20) is None
    assert s.get("k") == _version("c", SI + 5, LATEST)
    with s.backend.range(None, None) as cur:
        keys = [k for k, _ in cur]
    assert not any(k.startswith(b"\x80\x00\x00\x00\x00\x00\x00\x00") for k in keys), keys
    s.close()


def test_changelog_replays_history(open_backend: Callable[[], Backend]) -> None:
    """One changelog entry per put, in put order, carrying its timestamp: replayed into an
    empty store (restore) it rebuilds the same history, out-of-order puts included."""
    s = _open(open_backend())
    ops: list[tuple[str, str | None, int]] = [
        ("k", "v", BASE + 10),
        ("k", "old", BASE),
        ("k", None, BASE + 5),
        ("j", "x", BASE + 7),
    ]
    for k, v, t in ops:
        s.put(k, v, t)
    entries = s.pending()
    assert [(e.key, e.value[:8]) for e in entries] == [
        (b"k", (BASE + 10 + 2**63).to_bytes(8, "big")),
        (b"k", (BASE + 2**63).to_bytes(8, "big")),
        (b"k", (BASE + 5 + 2**63).to_bytes(8, "big")),
        (b"j", (BASE + 7 + 2**63).to_bytes(8, "big")),
    ]
    for e in entries:
        s.check_changelog(e.key, e.value)
    s.discard()
    assert s.get("k") is None  # nothing was committed
    restored = s.inner
    assert isinstance(restored, VersionedKeyValueStore)
    assert restored.apply_changelog([(e.key, e.value) for e in entries], {"o": 1}) == 4
    assert s.get("k", BASE + 2) == _version("old", BASE, BASE + 5)
    assert s.get("k", BASE + 6) is None
    assert s.get("k") == _version("v", BASE + 10, LATEST)
    assert s.get("j") == _version("x", BASE + 7, LATEST)
    s.close()


def test_changelog_config_keeps_history_from_compaction() -> None:
    """Kafka's `VersionedChangelogTopicConfig`: compacted, but not before history retention
    plus one day, so the versions a restore needs are still there."""
    spec = stores.versioned_key_value("v", "1h")
    config = spec.changelog_config()
    assert config["cleanup.policy"] == "compact"
    assert config["min.compaction.lag.ms"] == str(3_600_000 + 86_400_000)
    assert "retention.ms" not in config


def test_factory_defaults_and_refusals() -> None:
    """Kafka's default segment intervals (`RocksDbVersionedKeyValueBytesStoreSupplier`); a zero
    history retention is allowed (only the latest version), a negative one is not."""
    assert stores.versioned_key_value("a", "1m").segment_interval == 20_000
    assert stores.versioned_key_value("b", "5m").segment_interval == 60_000
    assert stores.versioned_key_value("c", "1d").segment_interval == 3_600_000
    assert stores.versioned_key_value("d", 0).retention == 0
    with pytest.raises(ConfigError):
        stores.versioned_key_value("e", -1)
    with pytest.raises(ConfigError):
        stores.versioned_key_value("f", "1h", segment_interval=0)


def test_versions_between_times(store: Any) -> None:
    """IQv2VersionedStoreIntegrationTest.verifyStore's MultiVersionedKeyQuery cases (KIP-968) on
    the store: every version, newest first (Kafka's ResultOrder.ANY) or ascending; the versions
    valid at some time of a range; none before the first; none for an unknown key. Tombstones
    are not versions, and versions past history retention are gone."""
    values, times = ["2", "20", "200", "2000"], [BASE, BASE + 10, BASE + 20, BASE + 30]
    for v, t in zip(values, times, strict=True):
        store.put("k", v, t)
    ends = [*times[1:], LATEST]
    every = [_version(v, t, end) for v, t, end in zip(values, times, ends, strict=True)]
    assert store.versions("k") == every[::-1]
    assert store.versions("k", ascending=True) == every
    assert store.versions("k", BASE + 15, BASE + 10_000) == every[:0:-1]
    assert store.versions("k", BASE + 10, BASE + 20) == [every[2], every[1]]
    assert store.versions("k", BASE - 100, BASE - 50) == []
    assert store.versions("missing") == []
    store.delete("k", BASE + 40)
    ended = _version("2000", BASE + 30, BASE + 40)
    assert store.versions("k", BASE + 25) == [ended, every[2]]
    store.put("k", "late", HISTORY_RETENTION + BASE + 35)  # BASE .. BASE + 30 pass retention
    assert store.versions("k", ascending=True) == [
        ended,
        _version("late", HISTORY_RETENTION + BASE + 35, LATEST),
    ]
