"""A partition's log as a transactional broker keeps it.

Every record takes an offset when it is appended, transactional or not; a transaction's commit
or abort appends a marker, which takes an offset too and is never handed to a reader. A
read_committed reader sees only records whose transaction committed (or that had none) and
stops at the last stable offset (LSO): the first offset of a transaction still open on the
partition. These are the semantics exactly-once rests on, so they are kept exactly.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["Entry", "PartitionLog", "Txn", "TxnState"]

Header = tuple[str, bytes | None]


class TxnState(enum.Enum):
    OPEN = "open"
    COMMITTED = "committed"
    ABORTED = "aborted"


@dataclass(eq=False)
class Txn:
    """One transaction of one producer epoch: where it wrote and what it will commit."""

    transactional_id: str
    producer_id: int
    epoch: int
    #: virtual time of its first write (the broker's transaction timeout counts from it)
    started: float
    state: TxnState = TxnState.OPEN
    #: (topic, partition) -> the first offset this transaction took there
    partitions: dict[tuple[str, int], int] = field(default_factory=dict)
    #: group -> {(topic, partition): offset}: offsets pending until the commit (KIP-447)
    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)


@dataclass(eq=False)
class Entry:
    """A record or a marker at one offset."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: list[Header] | None
    txn: Txn | None = None
    marker: bool = False

    def visible(self, read_committed: bool) -> bool:
        """A reader gets this entry (a marker never; an aborted record never; an open
        transaction's record only under read_uncommitted)."""
        if self.marker:
            return False
        if self.txn is None or self.txn.state is TxnState.COMMITTED:
            return True
        return not read_committed and self.txn.state is TxnState.OPEN


class PartitionLog:
    """One partition: entries by offset, the log start, and the open transactions on it."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.start = 0
        # transactions open on this partition -> their first offset here
        self._open: dict[Txn, int] = {}

    @property
    def high_watermark(self) -> int:
        return len(self.entries)

    @property
    def last_stable(self) -> int:
        """The first offset of a transaction still open here, else the high watermark."""
        if not self._open:
            return len(self.entries)
        return min(self._open.values())

    def end(self, read_committed: bool) -> int:
        """Where a reader of this isolation stops: the LSO or the high watermark."""
        return self.last_stable if read_committed else self.high_watermark

    def append(
        self,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: list[Header] | None,
        txn: Txn | None,
    ) -> int:
        offset = len(self.entries)
        self.entries.append(Entry(offset, key, value, timestamp, headers, txn))
        if txn is not None and txn not in self._open:
            self._open[txn] = offset
        return offset

    def end_transaction(self, txn: Txn) -> int:
        """Write `txn`'s marker (its state is already final); the marker's offset."""
        self._open.pop(txn, None)
        offset = len(self.entries)
        self.entries.append(Entry(offset, None, None, 0, None, txn, marker=True))
        return offset

    def next_visible(self, position: int, read_committed: bool) -> int | None:
        """The offset of the first entry a reader gets at or after `position` below its end."""
        end = self.end(read_committed)
        for off in range(max(position, self.start), end):
            if self.entries[off].visible(read_committed):
                return off
        return None
