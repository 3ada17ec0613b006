"""A damaged or foreign LMDB directory is reported, never read as state."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from kstream import stores
from kstream.errors import StoreCorruptedError
from kstream.state.restore import open_for_restore
from store_backends.lmdb_backend import LMDBBackend

MARKER = b"VALUE-MARKER-0123456789"


def write_sample(path: Path) -> None:
    be = LMDBBackend(str(path))
    be.write_batch({b"key-%03d" % i: MARKER + b"%03d" % i for i in range(50)}, (), {"o": 1})
    be.close()


def test_flipped_value_byte_is_detected(tmp_path: Path) -> None:
    write_sample(tmp_path)
    data = (tmp_path / "data.mdb").read_bytes()
    at = data.index(MARKER + b"007")
    damaged = data[:at] + b"X" + data[at + 1 :]
    (tmp_path / "data.mdb").write_bytes(damaged)
    be = LMDBBackend(str(tmp_path))
    assert be.get(b"key-006") == MARKER + b"006"
    with pytest.raises(StoreCorruptedError, match="checksum mismatch for key b'key-007'"):
        be.get(b"key-007")
    with pytest.raises(StoreCorruptedError, match="checksum"):
        be.verify()
    be.close()


def test_garbage_file_is_detected(tmp_path: Path) -> None:
    write_sample(tmp_path)
    (tmp_path / "data.mdb").write_bytes(b"\x5a" * 65536)
    with pytest.raises(StoreCorruptedError, match="cannot open LMDB environment"):
        LMDBBackend(str(tmp_path))


def test_foreign_format_is_refused(tmp_path: Path) -> None:
    env = lmdb.open(str(tmp_path), max_dbs=2)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"format", b"kstream-lmdb-0", db=meta)
    env.close()
    with pytest.raises(StoreCorruptedError, match="format b'kstream-lmdb-0'"):
        LMDBBackend(str(tmp_path))


def test_open_for_restore_wipes_damaged_state(tmp_path: Path) -> None:
    spec = stores.key_value("kv", backend="lmdb", value_serde="bytes")
    store, wiped = open_for_restore(spec, app_id="app", partition=0, state_dir=str(tmp_path))
    store.put("a", MARKER)
    store.flush({"changelog_offset": 1})
    path = Path(store.backend.path)  # type: ignore[attr-defined]
    store.close()
    assert not wiped
    data = (path / "data.mdb").read_bytes()
    at = data.index(MARKER)
    (path / "data.mdb").write_bytes(data[:at] + b"#" + data[at + 1 :])
    again, wiped = open_for_restore(spec, app_id="app", partition=0, state_dir=str(tmp_path))
    assert wiped
    assert again.checkpoint() == {}
    assert again.backend.approximate_num_entries() == 0
    again.close()


def test_map_grows_when_full(tmp_path: Path) -> None:
    be = LMDBBackend(str(tmp_path), map_size=64 * 1024)
    be.write_batch({b"k%06d" % i: b"v" * 200 for i in range(2000)}, ())
    assert be.approximate_num_entries() == 2000
    assert be._env.info()["map_size"] > 64 * 1024
    be.close()


def test_files_written_before_long_keys_still_read(tmp_path: Path) -> None:
    """The layout of earlier versions (databases `data` and `meta` only, keys of 1..511 bytes
    stored as they are) opens and reads unchanged, and takes long keys from then on."""
    from store_backends.lmdb_backend import FORMAT, _seal

    env = lmdb.open(str(tmp_path), max_dbs=2)
    data, meta = env.open_db(b"data"), env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"format", FORMAT, db=meta)
        txn.put(b"checkpoint", b'{"changelog_offset": 5}', db=meta)
        for k in (b"a", b"b" * 511):
            txn.put(k, _seal(k, b"old-" + k[:1]), db=data)
    env.close()
    be = LMDBBackend(str(tmp_path))
    assert be.checkpoint() == {"changelog_offset": 5}
    assert be.get(b"b" * 511) == b"old-b"
    be.write_batch({b"b" * 600: b"new", b"": b"empty"}, ())
    with be.range() as cur:
        assert [(k[:2], len(k), v) for k, v in cur] == [
            (b"", 0, b"empty"),
            (b"a", 1, b"old-a"),
            (b"bb", 511, b"old-b"),
            (b"bb", 600, b"new"),
        ]
    be.close()


def test_damaged_long_key_bucket_is_reported(tmp_path: Path) -> None:
    be = LMDBBackend(str(tmp_path))
    be.put(b"k" * 700, b"v")
    be.close()
    env = lmdb.open(str(tmp_path), max_dbs=3)
    with env.begin(write=True) as txn:
        txn.put(b"k" * 511, b"\x00\x00\x01", db=env.open_db(b"long", txn=txn))
    env.close()
    be = LMDBBackend(str(tmp_path))
    with pytest.raises(StoreCorruptedError, match="long-key bucket"):
        be.get(b"k" * 700)
    with pytest.raises(StoreCorruptedError, match="long-key bucket"):
        be.verify()
    be.close()
