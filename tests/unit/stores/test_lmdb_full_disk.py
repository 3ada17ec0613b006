"""A full device and a full LMDB map read as what they are, naming the store and the directory.

LMDB reports a full disk as "mdb_txn_commit: No space left on device", or from some
filesystems "Input/output error", naming neither the store nor the directory; on a full
device, a new environment's lock file (written through a memory map) killed the process with
SIGBUS. The device here is a real 1 MiB tmpfs (the tests are skipped where mounting is not
permitted).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest
from support.tiny_fs import tiny_fs

import store_backends
from kstream.errors import ConfigError, StoreCorruptedError, StoreError
from store_backends.disk import describe


@pytest.fixture
def full_dir(tmp_path: Path) -> Iterator[Path]:
    with tiny_fs(tmp_path / "small", "1m") as where:
        yield where


def _fill(state_dir: Path) -> tuple[StoreError, int]:
    """Write 2 KB values to a store under `state_dir` until the device is full: the error
    and how many batches were written."""
    be = store_backends.open("lmdb", name="counts", partition=3, state_dir=str(state_dir))
    n = 0
    try:
        while n < 10_000:
            be.write_batch({b"k%05d" % n: os.urandom(2000)}, (), {"changelog_offset": n + 1})
            n += 1
    except StoreError as e:
        return e, n
    finally:
        be.close()
    raise AssertionError("a 1 MiB device took 20 MB")


def test_a_full_device_is_named_as_such_with_the_state_dir(full_dir: Path) -> None:
    err, written = _fill(full_dir)
    msg = str(err)
    assert msg.startswith(f"no space left on the device holding state_dir ({full_dir}): "), msg
    assert f"lmdb store 'counts' partition 3 at {full_dir}" in msg, msg
    assert not isinstance(err, StoreCorruptedError)  # nothing to wipe: the write was undone

    # what was committed before is intact: the failed batch was aborted as a whole
    be = store_backends.open("lmdb", name="counts", partition=3, state_dir=str(full_dir))
    assert be.checkpoint() == {"changelog_offset": written}
    assert be.get(b"k%05d" % (written - 1)) is not None
    assert be.get(b"k%05d" % written) is None
    be.close()

    # a new store on the full device: the same message, not a SIGBUS of the whole process
    with pytest.raises(StoreError) as opened:
        store_backends.open("lmdb", name="other", partition=0, state_dir=str(full_dir))
    assert not isinstance(opened.value, StoreCorruptedError)
    assert str(opened.value).startswith(
        f"no space left on the device holding state_dir ({full_dir}): "
    ), opened.value
    assert "lmdb store 'other' partition 0" in str(opened.value)


def test_an_io_error_on_a_full_device_reads_as_no_space(full_dir: Path) -> None:
    """Some filesystems (and the fsync ending a commit) answer a full device with EIO."""
    _fill(full_dir)
    eio = lmdb.Error("mdb_txn_commit: Input/output error")
    said = describe(eio, f"state_dir ({full_dir})", str(full_dir))
    assert said is not None
    assert said.startswith(f"no space left on the device holding state_dir ({full_dir}): ")
    assert "input/output error" in said


def test_an_io_error_with_room_left_is_not_called_a_full_disk(tmp_path: Path) -> None:
    said = describe(lmdb.Error("mdb_txn_commit: Input/output error"), "state_dir (x)", "/")
    if said is not None and said.startswith("no space"):
        pytest.skip("the root filesystem is nearly full")
    assert said is not None and said.startswith("input/output error on the device holding")


def test_map_full_at_max_map_size_names_the_store_and_the_setting(tmp_path: Path) -> None:
    url = "lmdb://?map_size=65536&max_map_size=131072"
    be = store_backends.open(url, name="counts", partition=1, state_dir=str(tmp_path))
    n = 0
    with pytest.raises(StoreError) as full:
        while n < 1000:
            be.write_batch({b"k%05d" % n: os.urandom(1000)}, (), {"changelog_offset": n + 1})
            n += 1
    msg = str(full.value)
    assert re.match(
        rf"LMDB map full: lmdb store 'counts' partition 1 at {re.escape(str(tmp_path))}\S* "
        r"reached its max_map_size of 131072 bytes; raise max_map_size",
        msg,
    ), msg
    assert be._env.info()["map_size"] == 131072  # grew from 64 KiB up to the limit, no further
    assert be.checkpoint() == {"changelog_offset": n}
    be.close()


@pytest.mark.parametrize("value", ["lots", "-1"])
def test_a_bad_max_map_size_is_a_config_error(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError, match="max_map_size must"):
        store_backends.open(f"lmdb://?max_map_size={value}", state_dir=str(tmp_path))
