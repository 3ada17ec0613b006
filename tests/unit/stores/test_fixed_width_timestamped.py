"""Fixed-width values in timestamped stores: packed and unpacked with their timestamp in one
struct call (`kstream.state.keyvalue.ts_struct`), byte for byte what the serde writes after
the timestamp, and refused as the serde refuses them."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path
from typing import Any

import pytest

from kstream import stores
from kstream.errors import SerdeError
from kstream.serde import BUILTIN
from kstream.state import open_store
from kstream.state.keyvalue import NO_TIMESTAMP, timestamped, ts_struct
from kstream.state.window import TimestampedSerde as WindowTimestamped

TS = struct.Struct(">q")
VALUES = {
    "long": [0, -1, 2**63 - 1, 42],
    "integer": [0, -(2**31), 7],
    "double": [0.5, -3.25, 12, 1e300],
    "float": [0.5, -3.25, 12],
}


def _kv(serde_name: str, tmp_path: Path) -> Any:
    spec = stores.key_value("kv", key_serde="string")
    spec = dataclasses.replace(spec, value_serde=timestamped(BUILTIN[serde_name]))
    return open_store(spec, app_id="app", partition=0, state_dir=str(tmp_path))


def _window(serde_name: str, tmp_path: Path) -> Any:
    spec = stores.window("w", 100_000, 1_000, key_serde="string")
    spec = dataclasses.replace(spec, value_serde=WindowTimestamped(BUILTIN[serde_name]))
    return open_store(spec, app_id="app", partition=0, state_dir=str(tmp_path))


def test_only_the_fixed_width_serdes_have_a_struct() -> None:
    assert ts_struct(BUILTIN["long"])[0].format == ">qq"  # type: ignore[index]
    assert ts_struct(BUILTIN["double"])[0].format == ">qd"  # type: ignore[index]
    for name in ("string", "json", "bytes", "boolean", "auto"):
        assert ts_struct(BUILTIN[name]) is None


@pytest.mark.parametrize("serde_name", sorted(VALUES))
def test_key_value_writes_the_bytes_the_serde_writes_and_reads_them_back(
    serde_name: str, tmp_path: Path
) -> None:
    kv = _kv(serde_name, tmp_path)
    inner = BUILTIN[serde_name]
    get, put = kv.timestamped_access()
    for i, v in enumerate(VALUES[serde_name]):
        key = f"k{i}"
        kb, old, ts = get(key)
        assert (old, ts) == (None, NO_TIMESTAMP)
        put(kb, v, 1_000 + i)
        assert kv._cache.data[kb] == TS.pack(1_000 + i) + inner.to_bytes(v)
        assert get(key) == (kb, inner.from_bytes(inner.to_bytes(v)), 1_000 + i)
        assert kv.get_with_timestamp(key) == (inner.from_bytes(inner.to_bytes(v)), 1_000 + i)
    kv.flush()  # read back from the backend too
    assert get("k1")[1:] == (inner.from_bytes(inner.to_bytes(VALUES[serde_name][1])), 1_001)


@pytest.mark.parametrize(
    ("serde_name", "bad"),
    [("long", 2**64), ("long", True), ("integer", 2**31), ("double", 10**400), ("float", 1e300)],
)
def test_what_the_serde_refuses_is_refused_with_its_error(
    serde_name: str, bad: Any, tmp_path: Path
) -> None:
    get, put = _kv(serde_name, tmp_path).timestamped_access()
    with pytest.raises(SerdeError):
        put(get("k")[0], bad, 5)
    w = _window(serde_name, tmp_path / "w")
    with pytest.raises(SerdeError):
        w.put_timestamped("k", bad, 5, 0)


@pytest.mark.parametrize("serde_name", sorted(VALUES))
def test_window_store_writes_the_bytes_the_serde_writes_and_reads_them_back(
    serde_name: str, tmp_path: Path
) -> None:
    w = _window(serde_name, tmp_path)
    inner = BUILTIN[serde_name]
    for i, v in enumerate(VALUES[serde_name]):
        start = 1_000 * i
        assert w.get_timestamped("k", start) is None
        w.put_timestamped("k", v, start + 5, start)
        assert w.get_timestamped("k", start) == (inner.from_bytes(inner.to_bytes(v)), start + 5)
        assert w.get("k", start) == inner.from_bytes(inner.to_bytes(v))
    assert w._cache.data[w._pkey("k", 0)] == TS.pack(5) + inner.to_bytes(VALUES[serde_name][0])
