"""The contract every state backend fulfils, and the cursor type they share.

A backend is deliberately dumb: an ordered bytes -> bytes map plus one opaque checkpoint dict.
Everything typed (serdes, windows, the write cache, the changelog) lives above it in
`kstream.state`, so a new backend only has to get ordering and atomicity right.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

KV = tuple[bytes, bytes]


class Cursor:
    """An iterator over `(key, value)` pairs that owns a resource and must be closed.

    Cursors are context managers so that LMDB read transactions and Redis scans end even when
    the caller stops iterating early. Iterating to the end closes the cursor as well.
    """

    __slots__ = ("_closed", "_it", "_on_close")

    def __init__(self, it: Iterator[Any], on_close: Callable[[], None] | None = None) -> None:
        self._it = it
        self._on_close = on_close
        self._closed = False

    def __iter__(self) -> Cursor:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        try:
            return next(self._it)
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        close_it = getattr(self._it, "close", None)
        if close_it is not None:
            close_it()
        if self._on_close is not None:
            self._on_close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Cursor:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # A forgotten cursor must not pin an LMDB reader slot forever.
        try:
            self.close()
        except Exception:
            pass


class BatchedPoints:
    """`put` and `delete` as one-entry batches, for backends whose only write is a batch.

    Their batch is the one place that validates, checkpoints and commits, so single writes
    go through it rather than repeating that logic.
    """

    def write_batch(
        self,
        puts: dict[bytes, bytes],
        deletes: Iterable[bytes],
        checkpoint: dict[str, Any] | None = None,
    ) -> None:
        raise NotImplementedError

    def put(self, key: bytes, value: bytes) -> None:
        self.write_batch({key: value}, ())

    def delete(self, key: bytes) -> None:
        self.write_batch({}, (key,))


@runtime_checkable
class Backend(Protocol):
    """An ordered bytes -> bytes map with an atomic batch write and a checkpoint.

    Ranges are inclusive on both ends; `None` leaves that end open. Ordering is plain
    lexicographic byte order. `write_batch` applies the puts, the deletes and the checkpoint
    all together or not at all: the checkpoint always describes exactly the data next to it.
    """

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def write_batch(
        self,
        puts: dict[bytes, bytes],
        deletes: Iterable[bytes],
        checkpoint: dict[str, Any] | None = None,
    ) -> None: ...

    def range(
        self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False
    ) -> Cursor: ...

    def prefix_scan(self, prefix: bytes) -> Cursor: ...

    def checkpoint(self) -> dict[str, Any]: ...

    def approximate_num_entries(self) -> int: ...

    def close(self) -> None: ...

    def destroy(self) -> None: ...


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None: no such key).

    Used to turn a prefix scan into a half-open range on backends that only have ranges.
    """
    p = bytearray(prefix)
    while p:
        if p[-1] != 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return None


def check_bytes(what: str, value: object) -> None:
    """Reject non-bytes early so a bad key never reaches a backend half-written."""
    if type(value) is not bytes:
        raise TypeError(f"{what} must be bytes, got {type(value).__name__}: {value!r:.80}")
