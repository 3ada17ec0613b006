"""Each store's check of a changelog record before a restore applies it.

What a store writes to its changelog passes its own check; a record with a key of another
layout or a value its serde cannot read is refused. Under the broker-compatibility component
every changelog record carries provenance (a no-input marker when a punctuation wrote it), so
a record without it is refused too.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kstream import stores
from kstream.records import Record, Windowed
from kstream.serde import serde
from kstream.state import StateStore, StoreSpec, open_store
from kstream.state.changelog import changelog_records
from kstream.state.keyvalue import timestamped
from kstream.state.provenance import HEADER, NO_SOURCE, encode
from kstream.state.restore_check import provenance_problem
from kstream.state.window import TimestampedSerde as WindowTimestamped


def _open(spec: StoreSpec, tmp_path: Path) -> Any:
    return open_store(
        spec, app_id="app", partition=0, state_dir=str(tmp_path), default_backend="memory"
    )


def _own_records_pass(store: StateStore) -> list[tuple[bytes, bytes | None]]:
    """The store's pending writes as changelog records, each checked by the store."""
    out = [(e.key, e.value) for e in store.pending()]
    assert out
    for key, value in out:
        store.check_changelog(key, value)
    return out


def _refused(store: StateStore, key: bytes, value: bytes | None) -> None:
    with pytest.raises(Exception):  # noqa: B017 - whatever the serde or layout check raises
        store.check_changelog(key, value)


def test_a_count_store_refuses_what_its_timestamped_long_serde_cannot_read(
    tmp_path: Path,
) -> None:
    spec = stores.key_value("counts", key_serde="string", value_serde=timestamped(serde("long")))
    kv = _open(spec, tmp_path)
    kv.put_with_timestamp("k", 3, 1000)
    kv.put("gone", None)
    ((key, value), (_, tombstone)) = _own_records_pass(kv)
    assert tombstone is None
    _refused(kv, key, b"\x01\x02\x03")
    _refused(kv, key, value + b"!")  # one byte too many
    _refused(kv, b"\xff\xfe", value)  # not UTF-8: no string key
    _refused(kv, key, (3).to_bytes(8, "big"))  # a bare long: no timestamp in front of it
    assert value == (1000).to_bytes(8, "big") + (3).to_bytes(8, "big")  # Kafka's layout
    kv.check_changelog(key, (5).to_bytes(8, "big") + (999).to_bytes(8, "big"))  # a forgery passes


def test_a_window_store_checks_its_key_layout_and_timestamped_value(tmp_path: Path) -> None:
    spec = stores.window(
        "w", 10_000, 1000, key_serde="string", value_serde=WindowTimestamped(serde("long"))
    )
    w = _open(spec, tmp_path)
    w.put_timestamped("k", 7, 1500, 1000)
    ((key, value),) = _own_records_pass(w)
    assert value == (1500).to_bytes(8, "big") + (7).to_bytes(8, "big")  # Kafka's layout
    _refused(w, key, value[8:])  # a bare long: no timestamp in front of it
    _refused(w, key + b"\x00", value)  # a key one byte longer than key + start
    _refused(w, key[:-1], value)
    _refused(w, b"no terminator", value)
    _refused(w, key, b"\x01\x02")


def test_a_window_store_with_duplicates_takes_the_sequence_number(tmp_path: Path) -> None:
    spec = stores.window("j", 10_000, 1000, retain_duplicates=True, key_serde="string")
    w = _open(spec.with_default_serdes(None, "string"), tmp_path)
    w.put("k", "left", 1000)
    w.put("k", "again", 1000)
    for key, _ in _own_records_pass(w):
        _refused(w, key + b"\x00\x00", b"x")


def test_a_session_store_checks_end_and_start(tmp_path: Path) -> None:
    spec = stores.session("s", 10_000, key_serde="string", value_serde="long")
    s = _open(spec, tmp_path)
    s.put(Windowed("k", 100, 200), 2)
    ((key, value),) = _own_records_pass(s)
    at = key.index(b"\x00\x01") + 2
    swapped = key[:at] + key[at + 8 :] + key[at : at + 8]  # end before start
    _refused(s, swapped, value)
    _refused(s, key[:-8], value)
    _refused(s, key, b"\x00")


def test_a_dedup_store_wants_an_eight_byte_first_seen_time(tmp_path: Path) -> None:
    d = _open(stores.dedup("d", 10_000, key_serde="string"), tmp_path)
    assert d.check_and_mark("id-1", 500)
    ((key, value),) = _own_records_pass(d)
    _refused(d, key, value + b"\x00")
    _refused(d, b"\xff", value)


def test_every_changelog_record_carries_provenance_and_one_without_is_refused(
    tmp_path: Path,
) -> None:
    kv = _open(stores.key_value("kv", key_serde="string", value_serde="long"), tmp_path)
    ctx = SimpleNamespace(current=Record(None, None, 0, (), "in", 2, 41), record_time=lambda: 5)
    kv.context = ctx
    kv.put("caused", 1)
    ctx.current = None  # a punctuation's write: no input record
    kv.put("punctuated", 2)
    recs = changelog_records(kv, "app", provenance=True)
    assert [r.headers for r in recs] == [
        [(HEADER, encode("in", 2, 41, 0))],
        [(HEADER, NO_SOURCE)],
    ]
    task_reads = {("in", 2)}
    assert [provenance_problem(r.headers, task_reads) for r in recs] == [None, None]
    assert "has no kstream.src header" in str(provenance_problem([], task_reads))
    assert "does not decode" in str(provenance_problem([(HEADER, b"\x07junk")], task_reads))
    other = [(HEADER, encode("in", 3, 41, 0))]
    assert "names in[3] offset 41, which its task does not read (it reads in[2])" in str(
        provenance_problem(other, task_reads)
    )
    assert [r.headers for r in changelog_records(kv, "app", provenance=False)] == [[], []]
