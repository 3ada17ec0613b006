"""Every built-in serde round-trips, and the fixed-width ones match Java's big-endian layout."""

from __future__ import annotations

import math
import struct
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kstream.serde import serde

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
doubles = st.floats(allow_nan=False)
float32 = st.floats(allow_nan=False, width=32)


def roundtrip(name: str, value: Any) -> Any:
    s = serde(name)
    data = s.to_bytes(value)
    assert isinstance(data, bytes)
    return s.from_bytes(data)


@given(st.binary())
def test_bytes_roundtrip(v: bytes) -> None:
    assert roundtrip("bytes", v) == v


@given(st.text())
def test_string_roundtrip_is_utf8(v: str) -> None:
    assert serde("string").to_bytes(v) == v.encode("utf-8")
    assert roundtrip("string", v) == v


@given(json_values.filter(lambda v: v is not None))
def test_json_roundtrip(v: Any) -> None:
    assert roundtrip("json", v) == v


@given(int32)
def test_integer_is_java_int(v: int) -> None:
    data = serde("integer").to_bytes(v)
    assert data == v.to_bytes(4, "big", signed=True)
    assert roundtrip("integer", v) == v


@given(int64)
def test_long_is_java_long(v: int) -> None:
    data = serde("long").to_bytes(v)
    assert data == v.to_bytes(8, "big", signed=True)
    assert roundtrip("long", v) == v


@given(doubles)
def test_double_is_ieee754_big_endian(v: float) -> None:
    data = serde("double").to_bytes(v)
    assert data == struct.pack(">d", v)
    assert roundtrip("double", v) == v


@given(st.floats(allow_nan=True))
def test_double_nan_survives(v: float) -> None:
    out = roundtrip("double", v)
    assert out == v or (math.isnan(v) and math.isnan(out))


@given(float32)
def test_float_roundtrip(v: float) -> None:
    assert len(serde("float").to_bytes(v) or b"") == 4
    assert roundtrip("float", v) == v


@given(st.booleans())
def test_boolean_roundtrip(v: bool) -> None:
    assert serde("boolean").to_bytes(v) == (b"\x01" if v else b"\x00")
    assert roundtrip("boolean", v) is v


@given(st.uuids())
def test_uuid_is_its_string(v: uuid.UUID) -> None:
    assert serde("uuid").to_bytes(v) == str(v).encode("utf-8")
    assert roundtrip("uuid", v) == v


auto_scalars = st.one_of(st.booleans(), int64, st.floats(allow_nan=False), st.text(), st.binary())


@given(auto_scalars | st.tuples(st.integers(), st.text()))
def test_auto_roundtrip(v: Any) -> None:
    out = roundtrip("auto", v)
    assert out == v
    assert type(out) is type(v)


@given(int64, int64)
def test_auto_preserves_int_order(a: int, b: int) -> None:
    s = serde("auto")
    assert (s.to_bytes(a) < s.to_bytes(b)) == (a < b)


@given(st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_auto_preserves_float_order(a: float, b: float) -> None:
    s = serde("auto")
    if a < b:
        assert s.to_bytes(a) < s.to_bytes(b)


@given(st.text(), st.text())
def test_auto_preserves_string_order(a: str, b: str) -> None:
    s = serde("auto")
    assert (s.to_bytes(a) < s.to_bytes(b)) == (a < b)


# Nested data of every kind the auto encoding keeps (tuples stay tuples, dict keys keep types).
auto_data = st.recursive(
    auto_scalars | st.none() | st.integers(),
    lambda inner: (
        st.tuples(inner, inner)
        | st.lists(inner, max_size=4)
        | st.tuples(inner)
        | st.dictionaries(st.text(max_size=3) | int64, inner, max_size=3)
        | st.frozensets(st.text(max_size=3), max_size=3)
    ),
    max_leaves=12,
)


def _types(v: Any) -> Any:
    """The shape of `v`: its container and scalar types all the way down."""
    if isinstance(v, dict):
        return ("dict", sorted((repr(_types(k)), repr(_types(x))) for k, x in v.items()))
    if isinstance(v, tuple | list | frozenset):
        items = sorted(map(repr, map(_types, v))) if isinstance(v, frozenset) else map(_types, v)
        return (type(v).__name__, list(items))
    return type(v).__name__


@settings(deadline=None)
@given(auto_data.filter(lambda v: v is not None))  # a top-level None is a tombstone, not data
def test_auto_roundtrips_nested_data_with_types(v: Any) -> None:
    out = roundtrip("auto", v)
    assert out == v
    assert _types(out) == _types(v)  # tuples stay tuples, int keys stay ints


@settings(deadline=None)
@given(st.lists(st.text(max_size=4) | st.binary(max_size=4), max_size=3), st.data())
def test_auto_orders_tuples_of_one_type_as_python_does(a: list[Any], data: Any) -> None:
    # Tuples of strings (or of bytes) sort bytewise exactly as Python sorts them: range scans
    # over composite store keys see keys in the order users expect.
    kind = st.text(max_size=4) if all(isinstance(x, str) for x in a) else st.binary(max_size=4)
    if a and not all(type(x) is type(a[0]) for x in a):
        a = [x for x in a if type(x) is type(a[0])]
    b = data.draw(st.lists(kind if not a else st.from_type(type(a[0])), max_size=3))
    s = serde("auto")
    ta, tb = tuple(a), tuple(b)
    assert (s.to_bytes(ta) < s.to_bytes(tb)) == (ta < tb)


@given(st.dictionaries(st.text(max_size=3), int64, max_size=5))
def test_auto_gives_equal_dicts_equal_bytes(d: dict[str, int]) -> None:
    reordered = dict(reversed(list(d.items())))
    assert serde("auto").to_bytes(d) == serde("auto").to_bytes(reordered)
