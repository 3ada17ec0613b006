"""Built-in serdes: Java wire formats, tombstones, clear errors, custom serdes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import kstream
from kstream.errors import SerdeError
from kstream.records import Record
from kstream.serde import (
    ContextSerde,
    Serde,
    SerdeContext,
    deserialize_records,
    serde,
    serialize_records,
)

JAVA_BYTES = [
    ("long", 1, "0000000000000001"),
    ("long", -1, "ffffffffffffffff"),
    ("long", 2**63 - 1, "7fffffffffffffff"),
    ("long", -(2**63), "8000000000000000"),
    ("integer", -1, "ffffffff"),
    ("integer", 1, "00000001"),
    ("integer", 2**31 - 1, "7fffffff"),
    ("integer", 256, "00000100"),
    ("double", 1.0, "3ff0000000000000"),
    ("double", -2.5, "c004000000000000"),
    ("float", 1.0, "3f800000"),
    ("float", -2.5, "c0200000"),
    ("boolean", True, "01"),
    ("boolean", False, "00"),
    ("string", "héllo", "68c3a96c6c6f"),
    ("string", "", ""),
    ("bytes", b"\x00\xff", "00ff"),
    (
        "uuid",
        uuid.UUID("123e4567-e89b-12d3-a456-426614174000"),
        b"123e4567-e89b-12d3-a456-426614174000".hex(),
    ),
]


@pytest.mark.parametrize(("name", "value", "hexbytes"), JAVA_BYTES)
def test_java_wire_format(name: str, value: Any, hexbytes: str) -> None:
    s = serde(name)
    data = s.serialize(value, SerdeContext(topic="t"))
    assert data == bytes.fromhex(hexbytes)
    assert s.deserialize(data, SerdeContext(topic="t")) == value
    assert s.to_bytes(value) == data


@pytest.mark.parametrize(
    "name", ["bytes", "string", "json", "integer", "long", "double", "float", "boolean", "uuid"]
)
def test_none_is_a_tombstone_both_ways(name: str) -> None:
    s = serde(name)
    assert s.serialize(None) is None
    assert s.deserialize(None) is None
    assert s.to_bytes(None) is None
    assert s.from_bytes(None) is None


def test_json_is_utf8_json() -> None:
    s = serde("json")
    assert s.to_bytes({"a": [1, 2.5, None, "é"]}) == '{"a":[1,2.5,null,"é"]}'.encode()
    assert s.from_bytes(b'{"n": 3}') == {"n": 3}


def test_serde_is_exported_and_default_is_bytes() -> None:
    assert kstream.serde is serde
    assert serde(None).name == "bytes"
    assert serde("str") is serde("string")
    assert serde("int") is serde("integer")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("string", 5, "string serde expects str, got int: 5"),
        ("bytes", "x", "bytes serde expects bytes, got str: 'x'"),
        ("integer", 2**31, "integer serde: 2147483648 does not fit"),
        ("integer", True, "integer serde expects int, got bool"),
        ("long", 1.5, "long serde expects int, got float"),
        ("double", "1", "double serde expects float or int, got str"),
        ("boolean", 1, "boolean serde expects bool, got int"),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", "uuid serde expects uuid.UUID, got str"),
        ("json", {1, 2}, "json serde: cannot serialize set"),
    ],
)
def test_serialize_errors_name_serde_and_type(name: str, value: Any, message: str) -> None:
    with pytest.raises(SerdeError) as e:
        serde(name).serialize(value)
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("integer", b"\x00\x01", "integer serde expects 4 bytes, got 2"),
        ("long", b"\x00" * 4, "long serde expects 8 bytes, got 4"),
        ("double", b"", "double serde expects 8 bytes, got 0"),
        ("boolean", b"\x02", "boolean serde expects one byte 0x00 or 0x01, got b'\\x02'"),
        ("string", b"\xff", "string serde: invalid UTF-8"),
        ("uuid", b"not-a-uuid", "uuid serde: not a UUID string: b'not-a-uuid'"),
        ("json", b"{", "json serde: invalid JSON"),
    ],
)
def test_deserialize_errors(name: str, data: bytes, message: str) -> None:
    with pytest.raises(SerdeError) as e:
        serde(name).deserialize(data)
    assert str(e.value).startswith(message)


def test_unknown_serde_lists_the_builtins() -> None:
    with pytest.raises(SerdeError) as e:
        serde("avro2")
    msg = str(e.value)
    assert msg.startswith("unknown serde 'avro2'; built-in serdes are: ")
    for name in ("bytes", "string", "json", "integer", "long", "double", "float", "boolean"):
        assert name in msg


def test_bad_serde_spec() -> None:
    with pytest.raises(SerdeError) as e:
        serde(42)  # type: ignore[arg-type]
    assert str(e.value) == (
        "cannot use 42 as a serde: give a name, a Serde, or a (serializer_fn, deserializer_fn) pair"
    )


def test_function_pair_serde() -> None:
    s = serde((lambda v: str(v * 2).encode(), lambda b: int(b) // 2))
    assert s.to_bytes(21) == b"42"
    assert s.from_bytes(b"42") == 21
    assert s.serialize(None) is None
    assert not s.needs_context


def test_duck_typed_serde_sees_the_context() -> None:
    seen: list[SerdeContext] = []

    class Prefixed:
        def serialize(self, value: str, ctx: SerdeContext) -> bytes:
            seen.append(ctx)
            return f"{ctx.topic}:{value}".encode()

        def deserialize(self, data: bytes, ctx: SerdeContext) -> str:
            seen.append(ctx)
            return data.decode().split(":", 1)[1]

    s = serde(Prefixed())
    ctx = SerdeContext(topic="orders", headers=[("h", b"1")], is_key=True)
    assert s.needs_context
    assert s.serialize("x", ctx) == b"orders:x"
    assert s.deserialize(b"orders:x", ctx) == "x"
    assert s.serialize(None, ctx) is None
    assert seen == [ctx, ctx]
    assert s.to_bytes("y") == b"None:y"  # the context-free path uses an empty context


def test_context_serde_subclass() -> None:
    class Upper(ContextSerde):
        def serialize(self, value: Any, ctx: SerdeContext | None = None) -> bytes | None:
            return None if value is None else value.upper().encode()

        def deserialize(self, data: bytes | None, ctx: SerdeContext | None = None) -> Any:
            return None if data is None else data.decode().lower()

    s = Upper("upper")
    assert isinstance(s, Serde)
    assert s.needs_context
    assert s.to_bytes("ab") == b"AB"
    assert s.from_bytes(b"AB") == "ab"
    assert repr(s) == "Serde('upper')"


def test_auto_never_unpickles_what_it_reads() -> None:
    """Internal topics and stores are writable by others: a pickle there must not run."""
    import pickle

    class Boom:
        def __reduce__(self) -> tuple[Any, tuple[str]]:
            return (print, ("this would have run",))

    crafted = b"\x40" + pickle.dumps(Boom())
    with pytest.raises(SerdeError, match="unknown type tag 0x40"):
        serde("auto").from_bytes(crafted)


def test_auto_refuses_code_objects_and_says_how_to_give_a_serde() -> None:
    class Point:
        pass

    with pytest.raises(SerdeError, match=r"Point.*value_serde='json'"):
        serde("auto").to_bytes(Point())


# --- the C functions the batch paths call first --------------------------------------------

_INPUTS: list[Any] = [
    None,
    b"",
    b"plain",
    "h\u00e9llo".encode(),
    b"\xff\xfe not utf-8",
    b'{"a": [1, 2.5, null]}',
    b"{not json",
    b"42",
    bytearray(b"ab"),
    "text",
    "",
    7,
    3.5,
    {"k": 1},
    [1, "x"],
    True,
    {1: "non-str key"},  # orjson.dumps raises; the json serde writes it (OPT_NON_STR_KEYS)
    2**70,  # beyond 64 bits: orjson raises, and so does the json serde
    {"nested": {"k": [None, 1.5e300]}},
]


def _outcome(fn: Any, arg: Any) -> tuple[str, Any]:
    try:
        return "value", fn(arg)
    except Exception as e:  # the kind of failure is what matters here
        return "error", type(e).__name__


@pytest.mark.parametrize("name", ["string", "json", "bytes"])
@pytest.mark.parametrize("arg", _INPUTS, ids=repr)
def test_a_serdes_c_functions_agree_with_its_full_functions_or_raise(name: str, arg: Any) -> None:
    """The source and sink call `c_from_bytes` / `c_to_bytes` first and the full function when
    they raise: so wherever the C function returns, it must return what the full one does,
    and the full one then decides every other input (None passes through, bad input is a
    SerdeError)."""
    s = serde(name)
    pairs = [(s.c_to_bytes, s.to_bytes)]
    if arg is None or isinstance(arg, bytes | bytearray):  # what a deserializer is given
        pairs.append((s.c_from_bytes, s.from_bytes))
    assert s.c_to_bytes is not None or s.c_from_bytes is not None
    for c_fn, full in pairs:
        if c_fn is None:
            continue
        if arg is None and c_fn is s.c_to_bytes:
            continue  # see below
        kind, got = _outcome(c_fn, arg)
        if kind == "value":
            full_kind, expected = _outcome(full, arg)
            assert (full_kind, expected) == ("value", got)
            assert type(expected) is type(got)
    if arg is None:
        # a sink never hands None to c_to_bytes (orjson.dumps writes it as b"null"); a source
        # hands whatever it reads to c_from_bytes, which must then raise
        assert s.c_from_bytes is None or _outcome(s.c_from_bytes, None)[0] == "error"
        assert s.from_bytes(None) is None and s.to_bytes(None) is None


def test_serdes_without_c_functions_leave_them_unset() -> None:
    custom = Serde(lambda v: v, lambda b: b)
    assert custom.c_to_bytes is None and custom.c_from_bytes is None
    assert serde("long").c_from_bytes is None
    assert serde("long").c_to_bytes is None


# --- batches: one error rule for every caller -------------------------------------------------


class _Tagged(ContextSerde):
    """Reads its context: a value is `<topic>:<key or value>:<utf-8>`."""

    def serialize(self, value: Any, ctx: SerdeContext | None = None) -> bytes | None:
        if value == "bad":
            raise SerdeError("tagged serde: 'bad' is refused")
        return None if value is None else value.encode()

    def deserialize(self, data: bytes | None, ctx: SerdeContext | None = None) -> Any:
        assert ctx is not None
        if data == b"\xff":
            raise SerdeError("tagged serde: invalid")
        part = "key" if ctx.is_key else "value"
        return None if data is None else f"{ctx.topic}:{part}:{data.decode()}"


@pytest.mark.parametrize("name", ["string", "json", "long", "bytes", "auto"])
def test_a_batch_is_each_item_through_the_serde(name: str) -> None:
    s = serde(name)
    values: dict[str, list[Any]] = {
        "string": ["a", None, "b"],
        "json": [{"x": 1}, None, [2]],
        "long": [1, None, -2],
    }
    items = values.get(name, [b"a", None, b"b"])
    encoded = s.serialize_batch(items)
    assert encoded == [s.serialize(v) for v in items]
    assert s.deserialize_batch(encoded) == [s.deserialize(b) for b in encoded]


def test_a_bad_item_raises_the_serde_s_own_error_or_goes_to_on_error() -> None:
    s = serde("json")
    data = [b"1", b"{oops", None, b"[", b"2"]
    with pytest.raises(SerdeError, match=r"invalid JSON .*b'\{oops'"):
        s.deserialize_batch(data)
    bad: list[tuple[int, str]] = []
    out = s.deserialize_batch(data, on_error=lambda i, e: bad.append((i, type(e).__name__)))
    assert out == [1, None, None, None, 2]
    assert bad == [(1, "SerdeError"), (3, "SerdeError")]
    with pytest.raises(SerdeError, match="long serde expects int, got str"):
        serde("long").serialize_batch([1, "2", 3])


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        ("long", [0, -1, 2**63 - 1, None], [2**63, True, 1.5, "1"]),
        ("integer", [7, -(2**31), None], [2**31, False]),
        ("double", [0.5, 3, None], [10**400, "x", True]),
        ("float", [0.25, -2, None], [1e300]),
    ],
)
def test_fixed_width_batches_write_what_the_serde_writes_and_refuse_what_it_refuses(
    name: str, good: list[Any], bad: list[Any]
) -> None:
    """A fixed-width serde's batch packs its exact classes in C (`Serde.fixed`): the same
    bytes as one call each, and the serde's own error for anything it refuses."""
    s = serde(name)
    assert s.serialize_batch(good) == [s.to_bytes(v) for v in good]
    for v in bad:
        with pytest.raises(SerdeError):
            s.serialize_batch([*good, v])
        refused: list[int] = []
        out = s.serialize_batch([v, *good], on_error=lambda i, _e, seen=refused: seen.append(i))
        assert (out, refused) == ([None, *(s.to_bytes(g) for g in good)], [0])


def test_a_context_serde_is_given_each_item_s_context() -> None:
    s = _Tagged()
    contexts = [SerdeContext("a", (), True), SerdeContext("b", (), False)]
    assert s.deserialize_batch([b"x", b"y"], contexts.__getitem__) == ["a:key:x", "b:value:y"]
    bad: list[int] = []
    assert s.serialize_batch(["bad", "ok"], on_error=lambda i, _e: bad.append(i)) == [None, b"ok"]
    assert bad == [0]


def _records(*pairs: tuple[bytes | None, bytes | None]) -> list[Record]:
    return [Record(k, v, 10 * i, [("h", b"1")], "in", 2, i) for i, (k, v) in enumerate(pairs)]


@pytest.mark.parametrize("key_serde", [serde("string"), _Tagged()], ids=["plain", "context"])
def test_records_are_decoded_in_place_and_each_bad_one_is_named_once(key_serde: Serde) -> None:
    records = _records((b"k0", b"1"), (b"\xff", b"{"), (b"k2", b"{"), (None, None), (b"k4", b"4"))
    bad = deserialize_records(records, key_serde, serde("json"))
    # record 1: its key is bad (its value too, not reported); record 2: its value
    assert [(b.index, b.part, type(b.error).__name__) for b in bad] == [
        (1, "key", "SerdeError"),
        (2, "value", "SerdeError"),
    ]
    # the bad ones as they came, bytes and all; the others decoded with their context
    assert [(r.key, r.value) for r in records[1:3]] == [(b"\xff", b"{"), (b"k2", b"{")]
    good = [(r.key, r.value) for i, r in enumerate(records) if i not in (1, 2)]
    if isinstance(key_serde, _Tagged):
        assert good == [("in:key:k0", 1), (None, None), ("in:key:k4", 4)]
    else:
        assert good == [("k0", 1), (None, None), ("k4", 4)]


def test_records_are_encoded_for_their_topic_with_bad_ones_named() -> None:
    records = [
        Record(k, v, 0, (), "in", 0, i)
        for i, (k, v) in enumerate([("a", "x"), ("bad", "y"), ("c", "bad"), (None, None)])
    ]
    keys, values, bad = serialize_records(records, "out", _Tagged(), _Tagged())
    assert keys == [b"a", None, None, None] and values == [b"x", None, None, None]
    assert [(b.index, b.part) for b in bad] == [(1, "key"), (2, "value")]
