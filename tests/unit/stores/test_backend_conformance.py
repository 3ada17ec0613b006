"""One contract, every backend: memory, lru, lmdb and a real redis-server."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kstream.errors import StoreError
from store_backends import Backend

OpenBackend = Callable[[], Backend]
PERSISTENT = {"lmdb", "redis"}

KEYS = [b"\x00", b"\x00\x00", b"\x00\xff", b"a", b"ab", b"abc", b"b", b"\xff", b"\xff\xff"]


def fill(be: Backend) -> None:
    be.write_batch({k: b"v" + k for k in KEYS}, ())


def test_empty_backend(open_backend: OpenBackend) -> None:
    be = open_backend()
    assert be.get(b"a") is None
    assert be.checkpoint() == {}
    assert be.approximate_num_entries() == 0
    with be.range() as cur:
        assert list(cur) == []
    with be.prefix_scan(b"a") as cur:
        assert list(cur) == []


def test_put_get_overwrite_delete(open_backend: OpenBackend) -> None:
    be = open_backend()
    be.put(b"k", b"1")
    assert be.get(b"k") == b"1"
    be.put(b"k", b"2")
    assert be.get(b"k") == b"2"
    be.put(b"e", b"")
    assert be.get(b"e") == b""
    be.delete(b"k")
    assert be.get(b"k") is None
    be.delete(b"never-there")
    assert be.approximate_num_entries() == 1


def test_range_is_byte_ordered_and_inclusive(open_backend: OpenBackend) -> None:
    be = open_backend()
    fill(be)
    with be.range() as cur:
        assert [k for k, _ in cur] == sorted(KEYS)
    with be.range(b"a", b"b") as cur:
        assert list(cur) == [(b"a", b"va"), (b"ab", b"vab"), (b"abc", b"vabc"), (b"b", b"vb")]
    with be.range(b"aa", b"ab\x00") as cur:
        assert [k for k, _ in cur] == [b"ab"]
    with be.range(None, b"\x00\x00") as cur:
        assert [k for k, _ in cur] == [b"\x00", b"\x00\x00"]
    with be.range(b"\xff", None) as cur:
        assert [k for k, _ in cur] == [b"\xff", b"\xff\xff"]
    with be.range(b"b", b"a") as cur:
        assert list(cur) == []
    with be.range(b"abc", b"abc") as cur:
        assert list(cur) == [(b"abc", b"vabc")]


def test_reverse_range(open_backend: OpenBackend) -> None:
    be = open_backend()
    fill(be)
    with be.range(reverse=True) as cur:
        assert [k for k, _ in cur] == sorted(KEYS, reverse=True)
    with be.range(b"a", b"abz", reverse=True) as cur:
        assert [k for k, _ in cur] == [b"abc", b"ab", b"a"]
    with be.range(None, b"\x00\x01", reverse=True) as cur:
        assert [k for k, _ in cur] == [b"\x00\x00", b"\x00"]
    with be.range(b"c", None, reverse=True) as cur:
        assert [k for k, _ in cur] == [b"\xff\xff", b"\xff"]
    with be.range(b"c", b"d", reverse=True) as cur:
        assert list(cur) == []


def test_prefix_scan(open_backend: OpenBackend) -> None:
    be = open_backend()
    fill(be)
    with be.prefix_scan(b"a") as cur:
        assert [k for k, _ in cur] == [b"a", b"ab", b"abc"]
    with be.prefix_scan(b"\xff") as cur:
        assert [k for k, _ in cur] == [b"\xff", b"\xff\xff"]
    with be.prefix_scan(b"\x00") as cur:
        assert [k for k, _ in cur] == [b"\x00", b"\x00\x00", b"\x00\xff"]
    with be.prefix_scan(b"zz") as cur:
        assert list(cur) == []


def test_large_scan_crosses_pages(open_backend: OpenBackend) -> None:
    be = open_backend()
    keys = [i.to_bytes(2, "big") + b"k" for i in range(1500)]
    be.write_batch(dict.fromkeys(keys, b"x"), ())
    with be.range() as cur:
        assert [k for k, _ in cur] == keys
    with be.range(reverse=True) as cur:
        assert [k for k, _ in cur] == keys[::-1]
    assert be.approximate_num_entries() == 1500


def test_write_batch_applies_puts_deletes_and_checkpoint(open_backend: OpenBackend) -> None:
    be = open_backend()
    fill(be)
    be.write_batch({b"new": b"1", b"a": b"changed"}, [b"b", b"ab"], {"offset": 42, "n": [1, 2]})
    assert be.get(b"new") == b"1"
    assert be.get(b"a") == b"changed"
    assert be.get(b"b") is None
    assert be.get(b"ab") is None
    assert be.checkpoint() == {"offset": 42, "n": [1, 2]}
    be.write_batch({}, (), None)
    assert be.checkpoint() == {"offset": 42, "n": [1, 2]}


def test_write_batch_is_all_or_nothing(open_backend: OpenBackend) -> None:
    be = open_backend()
    be.write_batch({b"a": b"1"}, (), {"offset": 1})
    with pytest.raises(TypeError):
        be.write_batch({b"b": b"2", b"c": "not bytes"}, [b"a"], {"offset": 2})  # type: ignore[dict-item]
    assert be.get(b"a") == b"1"
    assert be.get(b"b") is None
    assert be.checkpoint() == {"offset": 1}


def test_cursor_closes_on_early_exit(open_backend: OpenBackend) -> None:
    be = open_backend()
    fill(be)
    with be.range() as cur:
        first = next(iter(cur))
    assert first == (b"\x00", b"v\x00")
    assert cur.closed
    cur2 = be.range(b"a")
    assert [k for k, _ in cur2] == [b"a", b"ab", b"abc", b"b", b"\xff", b"\xff\xff"]
    assert cur2.closed
    # The backend stays usable (and writable) after many abandoned cursors.
    for _ in range(300):
        with be.range() as c:
            next(iter(c))
    be.put(b"z", b"1")
    assert be.get(b"z") == b"1"


def test_closed_backend_refuses_work(open_backend: OpenBackend) -> None:
    be = open_backend()
    be.put(b"a", b"1")
    be.close()
    with pytest.raises(StoreError, match="closed"):
        be.put(b"b", b"2")
    with pytest.raises(StoreError, match="closed"):
        be.range()


@pytest.mark.parametrize("backend_kind", sorted(PERSISTENT))
def test_reopen_keeps_data_and_checkpoint(open_backend: OpenBackend) -> None:
    """Only persistent backends: in-memory ones do not outlive close() by design."""
    be = open_backend()
    fill(be)
    be.write_batch({}, [b"a"], {"changelog_offset": 7})
    be.close()
    again = open_backend()
    assert again.checkpoint() == {"changelog_offset": 7}
    with again.range() as cur:
        assert [k for k, _ in cur] == sorted(set(KEYS) - {b"a"})


def test_destroy_removes_everything(open_backend: OpenBackend) -> None:
    be = open_backend()
    fill(be)
    be.write_batch({}, (), {"x": 1})
    be.destroy()
    again = open_backend()
    assert again.checkpoint() == {}
    assert again.approximate_num_entries() == 0
    assert again.get(b"a") is None


# --- keys every backend must accept: the empty key and long keys (Kafka accepts both) --------

LONG_4K = b"u" * 4096
LONG_64K = b"u" * 65536
# Keys around LMDB's 511-byte limit, including long keys sharing a 511-byte prefix with a
# shorter key and with each other (window and session keys add 8-16 bytes to a user key).
BASE = b"https://example.com/" + b"p" * 491  # 511 bytes
ODD_KEYS = [
    b"",
    b"\x00",
    b"a",
    BASE[:510],
    BASE,
    BASE + b"\x00",
    BASE + b"\x00" + b"\xff" * 8,
    BASE + b"a",
    BASE + b"a" * 16,
    BASE + b"b",
    BASE[:-1] + b"q",
    LONG_4K,
    LONG_4K + b"\x01",
    LONG_64K,
    b"v",
    b"\xff" * 600,
]


def value_of(k: bytes) -> bytes:
    return b"v" + k[:4] + len(k).to_bytes(4, "big")


def fill_odd(be: Backend) -> None:
    be.write_batch({k: value_of(k) for k in ODD_KEYS}, ())


def test_empty_and_long_keys_put_get_delete(open_backend: OpenBackend) -> None:
    be = open_backend()
    for k in (b"", LONG_4K, LONG_64K):
        be.put(k, b"value")
        assert be.get(k) == b"value"
        be.put(k, b"other")
        assert be.get(k) == b"other"
    assert be.get(LONG_4K + b"x") is None
    assert be.get(LONG_4K[:-1]) is None
    assert be.approximate_num_entries() == 3
    for k in (b"", LONG_4K, LONG_64K):
        be.delete(k)
        assert be.get(k) is None
    assert be.approximate_num_entries() == 0
    with be.range() as cur:
        assert list(cur) == []


def test_empty_and_long_keys_scan_in_byte_order(open_backend: OpenBackend) -> None:
    be = open_backend()
    fill_odd(be)
    expected = sorted(ODD_KEYS)
    assert expected[0] == b""
    with be.range() as cur:
        assert list(cur) == [(k, value_of(k)) for k in expected]
    with be.range(reverse=True) as cur:
        assert [k for k, _ in cur] == expected[::-1]
    assert be.approximate_num_entries() == len(ODD_KEYS)


@pytest.mark.parametrize(
    ("lo", "hi"),
    [
        pytest.param(b"", b"", id="empty-empty"),
        pytest.param(b"", b"a", id="empty-short"),
        pytest.param(None, b"", id="open-empty"),
        pytest.param(BASE, BASE + b"a", id="511-long"),
        pytest.param(BASE + b"\x00", BASE + b"a" * 17, id="long-long"),
        pytest.param(BASE[:510] + b"\x00", BASE + b"a\x00", id="short-long"),
        pytest.param(LONG_4K, LONG_64K, id="4k-64k"),
        pytest.param(LONG_4K + b"\x00", None, id="long-open"),
        pytest.param(BASE + b"b", BASE[:-1] + b"q" + b"z" * 600, id="long-bounds-across-buckets"),
        pytest.param(b"b", b"\xff" * 700, id="short-to-long"),
    ],
)
def test_ranges_with_empty_and_long_bounds(
    open_backend: OpenBackend, lo: bytes | None, hi: bytes | None
) -> None:
    be = open_backend()
    fill_odd(be)
    inside = [k for k in sorted(ODD_KEYS) if (lo is None or k >= lo) and (hi is None or k <= hi)]
    with be.range(lo, hi) as cur:
        assert [k for k, _ in cur] == inside
    with be.range(lo, hi, reverse=True) as cur:
        assert [k for k, _ in cur] == inside[::-1]


@pytest.mark.parametrize(
    "prefix",
    [
        pytest.param(b"", id="empty"),
        pytest.param(BASE, id="511"),
        pytest.param(BASE + b"a", id="long"),
        pytest.param(b"u" * 5000, id="5000"),
        pytest.param(b"\xff" * 600, id="all-ff"),
    ],
)
def test_prefix_scan_with_empty_and_long_prefixes(open_backend: OpenBackend, prefix: bytes) -> None:
    be = open_backend()
    fill_odd(be)
    with be.prefix_scan(prefix) as cur:
        assert [k for k, _ in cur] == [k for k in sorted(ODD_KEYS) if k.startswith(prefix)]


@pytest.mark.parametrize("backend_kind", sorted(PERSISTENT))
def test_reopen_keeps_empty_and_long_keys(open_backend: OpenBackend) -> None:
    be = open_backend()
    fill_odd(be)
    be.write_batch({}, [BASE + b"a", b""], {"changelog_offset": 3})
    be.close()
    again = open_backend()
    kept = sorted(set(ODD_KEYS) - {BASE + b"a", b""})
    with again.range() as cur:
        assert [k for k, _ in cur] == kept
    assert again.get(LONG_64K) == value_of(LONG_64K)
    assert again.checkpoint() == {"changelog_offset": 3}
