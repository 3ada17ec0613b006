"""Typed stores over the memory backend: write cache, flush/discard, windows, sessions, dedup."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kstream import stores
from kstream.errors import ConfigError
from kstream.records import Record, Windowed
from kstream.state import (
    ChangelogEntry,
    ChangeLoggingStore,
    KeyValueStore,
    StateStore,
    StoreSpec,
    open_store,
)
from kstream.state.changelog import changelog_records
from kstream.state.dedup import DedupStore
from kstream.state.session import SessionStore
from kstream.state.window import WindowStore


def open_(spec: StoreSpec, tmp_path: Path, backend: str = "memory") -> Any:
    return open_store(
        spec, app_id="app", partition=0, state_dir=str(tmp_path), default_backend=backend
    )


def test_spec_names_and_defaults() -> None:
    spec = stores.key_value("counts", key_serde="string")
    assert spec.changelog_topic("app") == "app-counts-changelog"
    filled = spec.with_default_serdes("bytes", "long")
    assert (filled.key_serde, filled.value_serde) == ("string", "long")
    w = stores.window("w", "1h", (5, "minutes"), retain_duplicates=True)
    assert (w.kind, w.retention, w.window_size, w.retain_duplicates) == (
        "window",
        3_600_000,
        300_000,
        True,
    )
    assert w.changelog_config()["cleanup.policy"] == "compact,delete"
    with pytest.raises(ConfigError, match="store name"):
        stores.key_value("bad name!")
    with pytest.raises(ConfigError, match="retention"):
        stores.session("s", 0)


def test_kv_reads_see_pending_writes_and_flush_applies_once(tmp_path: Path) -> None:
    kv: KeyValueStore = open_(stores.key_value("kv"), tmp_path)
    kv.put("b", 2)
    kv.put("a", 1)
    kv.put("c", 3)
    kv.put("a", 10)
    assert kv.get("a") == 10
    assert kv.backend.get(b"\x20a") is None  # nothing reaches the backend before flush
    assert list(kv.all()) == [("a", 10), ("b", 2), ("c", 3)]
    entries = kv.flush({"changelog_offset": 3})
    assert [(e.key, kv.value_serde.from_bytes(e.value)) for e in entries] == [
        (b"\x20b", 2),
        (b"\x20a", 10),
        (b"\x20c", 3),
    ]
    assert kv.checkpoint() == {"changelog_offset": 3}
    assert kv.flush() == []


def test_kv_discard_drops_pending_writes(tmp_path: Path) -> None:
    kv: KeyValueStore = open_(stores.key_value("kv"), tmp_path)
    kv.put("a", 1)
    kv.flush()
    kv.put("a", 2)
    kv.put("b", 3)
    kv.delete("a")
    assert kv.get("a") is None
    kv.discard()
    assert list(kv.all()) == [("a", 1)]


def test_kv_merge_of_pending_and_backend_in_scans(tmp_path: Path) -> None:
    kv: KeyValueStore = open_(
        stores.key_value("kv", key_serde="string", value_serde="json"), tmp_path
    )
    for k in ["a", "c", "e", "g"]:
        kv.put(k, k.upper())
    kv.flush()
    kv.put("b", "B")  # new, between backend keys
    kv.put("c", None)  # pending delete hides a backend key
    kv.put("e", "E2")  # pending overwrite
    kv.put("h", "H")  # new, after the last backend key
    assert list(kv.range("b", "g")) == [("b", "B"), ("e", "E2"), ("g", "G")]
    assert list(kv.range(None, "c")) == [("a", "A"), ("b", "B")]
    assert list(kv.range("b", "g", reverse=True)) == [("g", "G"), ("e", "E2"), ("b", "B")]
    assert list(kv.all()) == [("a", "A"), ("b", "B"), ("e", "E2"), ("g", "G"), ("h", "H")]
    assert kv.approximate_num_entries() == 5
    kv.put("ab", 1)
    assert list(kv.prefix_scan("a")) == [("a", "A"), ("ab", 1)]


def test_kv_put_if_absent_and_delete_return_old_values(tmp_path: Path) -> None:
    kv: KeyValueStore = open_(stores.key_value("kv"), tmp_path)
    assert kv.put_if_absent("k", 1) is None
    assert kv.put_if_absent("k", 2) == 1
    assert kv.get("k") == 1
    assert kv.delete("k") == 1
    assert kv.delete("k") is None
    assert kv.flush() == [ChangelogEntry(b"\x20k", None)]


def test_kv_int_keys_scan_in_numeric_order(tmp_path: Path) -> None:
    kv: KeyValueStore = open_(stores.key_value("kv"), tmp_path)
    for k in [5, -3, 100, 0, -1000, 2**40]:
        kv.put(k, str(k))
    kv.flush()
    assert [k for k, _ in kv.all()] == [-1000, -3, 0, 5, 100, 2**40]
    assert [k for k, _ in kv.range(-3, 5)] == [-3, 0, 5]


def test_read_only_view_hides_writes(tmp_path: Path) -> None:
    kv: KeyValueStore = open_(stores.key_value("kv"), tmp_path)
    kv.put("a", 1)
    view = kv.read_only()
    assert view.get("a") == 1
    assert list(view.all()) == [("a", 1)]
    with pytest.raises(AttributeError, match="read-only"):
        view.put("a", 2)


def test_source_provenance_is_carried_to_entries(tmp_path: Path) -> None:
    """A pending write keeps the provenance and time of the record being processed when it
    was made (the last write of a key wins), and a write with none has no provenance and the
    context's record time."""
    kv: KeyValueStore = open_(stores.key_value("kv"), tmp_path)
    ctx = SimpleNamespace(current=Record(None, None, 500, (), "in", 0, 41), record_time=lambda: 9)
    kv.context = ctx  # type: ignore[assignment]
    kv.put("a", 1)
    ctx.current = Record(None, None, 600, (), "in", 0, 42)
    kv.put("a", 2)
    ctx.current = None  # a punctuation's write
    kv.put("b", 3)
    assert kv.pending() == [
        ChangelogEntry(b"\x20a", kv.value_serde.to_bytes(2), ("in", 0, 42), 600),
        ChangelogEntry(b"\x20b", kv.value_serde.to_bytes(3), None, 9),
    ]


# --- window store --------------------------------------------------------------------------------


def wstore(tmp_path: Path, **kw: Any) -> WindowStore:
    spec = stores.window(
        "w",
        kw.pop("retention", 1000),
        kw.pop("size", 100),
        segment_interval=kw.pop("segment", 250),
        **kw,
    )
    store: WindowStore = open_(spec, tmp_path)
    return store


def test_window_fetch_bounds_and_order(tmp_path: Path) -> None:
    w = wstore(tmp_path)
    for start, v in [(300, "c"), (100, "a"), (200, "b"), (500, "e")]:  # out of order
        w.put("k", v, start)
    w.put("k2", "x", 200)
    w.put("k\x00", "prefix-neighbour", 200)
    assert list(w.fetch("k", 100, 300)) == [(100, "a"), (200, "b"), (300, "c")]
    assert list(w.fetch("k", 101, 299)) == [(200, "b")]
    assert list(w.fetch("k", 600, 900)) == []
    w.flush()
    assert list(w.fetch("k", 0, 10_000)) == [(100, "a"), (200, "b"), (300, "c"), (500, "e")]
    assert list(w.fetch_range("k", "k2", 200, 200)) == [
        (Windowed("k", 200, 300), "b"),
        (Windowed("k\x00", 200, 300), "prefix-neighbour"),
        (Windowed("k2", 200, 300), "x"),
    ]
    assert [wk.start for wk, _ in w.all() if wk.key == "k"] == [100, 200, 300, 500]


def test_window_retention_expires_and_drops_late_puts(tmp_path: Path) -> None:
    w = wstore(tmp_path, retention=1000)
    w.put("k", 1, 0)
    w.put("k", 2, 600)
    w.flush()
    w.put("k", 3, 1500)  # observed 1500 -> windows starting before 500 are expired
    assert list(w.fetch("k", 0, 2000)) == [(600, 2), (1500, 3)]
    w.put("k", 99, 100)  # late beyond retention: dropped
    assert list(w.fetch("k", 0, 2000)) == [(600, 2), (1500, 3)]
    w.flush()
    assert w.backend.get(w.seg(0) + b"k") is None
    phys = [k for k, _ in w.backend.range(None, b"\xff" * 8)]
    assert len(phys) == 2  # the expired segment was removed physically


def test_window_retain_duplicates_and_deterministic_retry(tmp_path: Path) -> None:
    w = wstore(tmp_path, retain_duplicates=True)
    w.put("k", "a", 100)
    w.put("k", "a", 100)
    w.put("k", None, 100)  # ignored with duplicates
    assert list(w.fetch("k", 100, 100)) == [(100, "a"), (100, "a")]
    first = [e.key for e in w.pending()]
    w.discard()
    w.put("k", "a", 100)
    w.put("k", "a", 100)
    assert [e.key for e in w.pending()] == first  # a retry writes the same changelog keys


def test_window_delete(tmp_path: Path) -> None:
    w = wstore(tmp_path)
    w.put("k", 1, 100)
    w.flush()
    w.put("k", None, 100)
    assert list(w.fetch("k", 0, 1000)) == []
    w.flush()
    assert list(w.all()) == []


def test_window_state_survives_changelog_replay(tmp_path: Path) -> None:
    w = wstore(tmp_path)
    for s in (100, 400, 900):
        w.put("k", s, s)
    log = [(e.key, e.value) for e in w.flush()]
    fresh = wstore(tmp_path / "other")
    assert fresh.apply_changelog(log, {"changelog_offset": 3}) == 3
    assert list(fresh.fetch("k", 0, 1000)) == [(100, 100), (400, 400), (900, 900)]
    assert fresh.observed == 900


# --- session store -------------------------------------------------------------------------------


def test_session_find_sessions_bounds(tmp_path: Path) -> None:
    s: SessionStore = open_(stores.session("s", 10_000, segment_interval=1000), tmp_path)
    s.put(Windowed("k", 0, 100), 1)
    s.put(Windowed("k", 2000, 2500), 3)
    s.put(Windowed("k", 500, 900), 2)
    s.put(Windowed("j", 0, 5000), 9)
    assert [w for w, _ in s.find_sessions("k", 100, 2000)] == [
        Windowed("k", 0, 100),
        Windowed("k", 500, 900),
        Windowed("k", 2000, 2500),
    ]
    assert [w for w, _ in s.find_sessions("k", 101, 1999)] == [Windowed("k", 500, 900)]
    assert list(s.find_sessions("k", 2600, 9000)) == []
    s.flush()
    s.remove(Windowed("k", 500, 900))
    assert [v for _, v in s.fetch("k")] == [1, 3]
    assert [w.key for w, _ in s.all()] == ["j", "k", "k"]


def test_session_retention_by_end(tmp_path: Path) -> None:
    s: SessionStore = open_(stores.session("s", 1000, segment_interval=500), tmp_path)
    s.put(Windowed("k", 0, 100), 1)
    s.put(Windowed("k", 50, 1200), 2)
    s.flush()
    s.put(Windowed("k", 2000, 2100), 3)  # observed end 2100: ends before 1100 expire
    assert [v for _, v in s.fetch("k")] == [2, 3]
    s.put(Windowed("k", 0, 500), 4)  # too late: dropped
    assert [v for _, v in s.fetch("k")] == [2, 3]


# --- dedup store ---------------------------------------------------------------------------------


def test_dedup_check_and_mark_with_retention(tmp_path: Path) -> None:
    d: DedupStore = open_(stores.dedup("d", 1000, segment_interval=300), tmp_path)
    assert d.check_and_mark("a", 0) is True
    assert d.check_and_mark("a", 999) is False
    assert d.check_and_mark("b", 600) is True
    assert d.contains("a") and d.contains("b") and not d.contains("c")
    d.flush()
    assert d.check_and_mark("c", 1500) is True  # observed 1500: "a" (seen at 0) has expired
    assert not d.contains("a")
    assert d.check_and_mark("a", 1501) is True
    assert d.first_seen("a") == 1501
    assert d.check_and_mark("b", 1502) is False


def test_dedup_restore_from_changelog(tmp_path: Path) -> None:
    d: DedupStore = open_(stores.dedup("d", 1000), tmp_path)
    d.check_and_mark("x", 10)
    log = [(e.key, e.value) for e in d.flush()]
    fresh: DedupStore = open_(stores.dedup("d", 1000), tmp_path / "2")
    fresh.apply_changelog(log, None)
    assert fresh.check_and_mark("x", 20) is False


def test_every_store_kind_opens_as_a_typed_store_inside_its_change_logging_layer(
    tmp_path: Path,
) -> None:
    specs = [
        stores.key_value("a"),
        stores.window("b", 10, 5),
        stores.session("c", 10),
        stores.dedup("d", 10),
    ]
    for spec in specs:
        st = open_(spec, tmp_path)
        assert isinstance(st, ChangeLoggingStore) and isinstance(st.inner, StateStore)
        assert st.spec is spec and st.name == spec.name and st.partition == 0
        st.close()


def test_a_store_without_changelog_has_no_change_logging_layer(tmp_path: Path) -> None:
    """`changelog=False` leaves the layer out (as Kafka's `withLoggingDisabled`): the store
    still keeps its write cache and flushes it, but has no changelog records to produce."""
    kv = open_(stores.key_value("kv", changelog=False), tmp_path)
    assert isinstance(kv, KeyValueStore)
    kv.put("a", 1)
    assert changelog_records(kv, "app") == []
    kv.flush()
    assert kv.get("a") == 1 and not kv.has_pending()


def test_the_layer_logs_what_the_transaction_leaves_and_restore_goes_around_it(
    tmp_path: Path,
) -> None:
    """Writes go through the layer to the typed store's write cache; the layer's records are
    the last write per key, in write order; a discarded batch leaves none; records applied by
    restore reach the backend without being logged again."""
    kv = open_(stores.key_value("kv", key_serde="string", value_serde="long"), tmp_path)
    kv.put("a", 1)
    kv.discard()
    assert changelog_records(kv, "app") == []
    kv.put("b", 1)
    kv.put("a", 2)
    kv.put("b", 3)
    recs = changelog_records(kv, "app", provenance=False)
    assert [(r.topic, r.partition, r.key, r.value) for r in recs] == [
        ("app-kv-changelog", 0, b"b", (3).to_bytes(8, "big")),
        ("app-kv-changelog", 0, b"a", (2).to_bytes(8, "big")),
    ]
    assert [(e.key, e.value) for e in kv.flush()] == [(r.key, r.value) for r in recs]
    assert kv.pending() == []
    kv.apply_changelog([(b"c", (4).to_bytes(8, "big"))], {"changelog_offset": 3})
    assert kv.get("c") == 4 and kv.pending() == []
    assert kv.checkpoint() == {"changelog_offset": 3}


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
def test_long_and_empty_user_keys_in_window_and_key_value_stores(
    tmp_path: Path, backend: str
) -> None:
    """Long URLs as keys: window keys add a timestamp and a sequence number to them and must
    still work (and sort by key, then time) on every backend, as must the empty key."""
    url = "https://example.com/" + "p" * 4000
    ws = open_(
        stores.window("w", 1000, 10, key_serde="string", value_serde="long"), tmp_path, backend
    )
    for t in (30, 10, 20):
        ws.put(url, t, t)
        ws.put(url + "/x", t + 1, t)
    ws.flush({})
    assert [(w.key, w.start, v) for w, v in ws.fetch_all(0, 100)] == [
        (url, 10, 10),
        (url, 20, 20),
        (url, 30, 30),
        (url + "/x", 10, 11),
        (url + "/x", 20, 21),
        (url + "/x", 30, 31),
    ]
    ws.close()
    kv = open_(stores.key_value("kv", key_serde="string", value_serde="long"), tmp_path, backend)
    kv.put("", 1)
    kv.put(url, 2)
    kv.flush({})
    assert list(kv.all()) == [("", 1), (url, 2)]
    assert kv.get("") == 1
    kv.close()


def test_timestamped_values_are_kafkas_value_and_timestamp_bytes(tmp_path: Path) -> None:
    """8-byte big-endian signed timestamp, then the value serde's bytes, whichever way the value
    was written; a plain put keeps -1 (no timestamp), as Kafka's ValueAndTimestamp.make does."""
    from kstream.serde import serde
    from kstream.state.keyvalue import timestamped

    spec = stores.key_value("kv", key_serde="string", value_serde=timestamped(serde("long")))
    kv = open_(spec, tmp_path)
    get, put = kv.timestamped_access()
    kv.put_with_timestamp("a", 3, 1_700_000_000_000)
    put(get("b")[0], 4, -2)
    kv.put("c", 5)
    raw = {e.key: e.value for e in kv.flush()}

    def layout(ts: int, v: int) -> bytes:
        return ts.to_bytes(8, "big", signed=True) + v.to_bytes(8, "big", signed=True)

    assert raw == {b"a": layout(1_700_000_000_000, 3), b"b": layout(-2, 4), b"c": layout(-1, 5)}
    assert [tuple(kv.get_with_timestamp(k)) for k in "abc"] == [
        (3, 1_700_000_000_000),
        (4, -2),
        (5, -1),
    ]
    assert get("b")[1:] == (4, -2) and kv.get("a") == 3
