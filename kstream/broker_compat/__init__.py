"""Compensations for brokers that are not Apache Kafka: the one place they live.

On Apache Kafka a transaction is the whole exactly-once story, as in Kafka Streams: a
`read_committed` consumer never sees a record of an aborted transaction, so outputs, changelogs
and offsets committed together are exact. With `broker_compat="none"` (the default) nothing
here runs.

The embedded Tansu broker (`kstreamd demo`, the tests' compatibility lane) shows records of
aborted transactions to `read_committed` readers. `broker_compat="tansu"` makes exactly-once
hold in the engine itself, at a CPU cost per record (bench/, "workarounds on"):

* **Provenance** (`kstream.state.provenance`): every record kstream produces, output or
  changelog, carries a `kstream.src` header naming the input record that caused it (topic,
  partition, offset, index among its outputs): deterministic, so a retry writes the same ids.
* **High marks** (`HighMarks`): a task drops an input record whose id is at or below the
  highest one it has seen from the same source partition on that input topic, so the aborted
  copies a downstream kstream task is shown are processed once. The marks live in a small
  changelogged store per task (`marks_spec`), written once per batch.
* **Restore filter** (`kstream.state.restore_check.is_committed`): a changelog record is
  applied only when its source offset is below the task's committed offset for that source
  partition (committed offsets are exact: the broker applies transactional offsets only on
  commit).
* **Restore provenance check** (`kstream.state.restore_check.provenance_problem`): every
  changelog record kstream writes carries the header (`NO_SOURCE` when no input record caused
  it), so a restore refuses one without it, with one that does not decode, or naming a
  partition its task does not read: a record some other producer wrote into the changelog.
* **No DeleteRecords**: Tansu's panics, so repartition topics are not purged.
* **Restore again if the committed offsets moved** (`BrokerCompat.committed_moves`): Tansu
  completes a rebalance before every member rejoined and accepts a departed member's offsets
  until it is fenced, so under exactly-once a new task's offsets are read again once its
  producer is up, and a task whose offsets moved is restored again from them.

Tansu's other gaps need nothing here: kstream finds the end of a partition from fetch
responses and end-of-partition events (as Kafka's own consumers do), which both brokers answer
correctly, and it never asks Tansu for compaction or retention to be right.

Direction: this component sits above the state package and below the runtime. The restore's
two checks read only the provenance header and the arguments the restore is given, so they are
the state package's (`kstream.state.restore_check`); the runtime, which holds the switches
(`ctx.compat`), turns them on by what it passes to the restore (committed offsets, a task's
source partitions). The high marks' store is an ordinary store spec (`kstream.stores`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kstream import stores
from kstream._lazy import lazy_exports
from kstream.state.provenance import decode

if TYPE_CHECKING:
    from kstream.broker_compat.reader import TopicReader, caught_up, read_unique
    from kstream.config import Config
    from kstream.state.spec import StoreSpec

__all__ = [
    "BrokerCompat",
    "HighMarks",
    "Mark",
    "TopicReader",
    "caught_up",
    "compat_of",
    "load_marks",
    "marks_key",
    "marks_spec",
    "marks_value",
    "read_unique",
]

# reading what kstream wrote, each provenance id once (kstream.broker_compat.reader), imported
# on first use: the runtime imports this package for its switches alone
__getattr__ = lazy_exports(
    globals(),
    {name: "kstream.broker_compat.reader" for name in ("TopicReader", "caught_up", "read_unique")},
)


@dataclass(frozen=True)
class BrokerCompat:
    """Which compensations run (all of them, or none)."""

    name: str

    @property
    def enabled(self) -> bool:
        return self.name != "none"

    @property
    def provenance(self) -> bool:
        """Stamp a `kstream.src` header on every output and changelog record."""
        return self.enabled

    @property
    def drop_repeats(self) -> bool:
        """Drop input records whose provenance id was seen (high marks per task)."""
        return self.enabled

    @property
    def restore_filter(self) -> bool:
        """Apply a changelog record only if its source offset was committed."""
        return self.enabled

    @property
    def committed_moves(self) -> bool:
        """A group's committed offsets may still move after a new owner read them: the broker
        completes a rebalance before every member rejoined and accepts a departed member's
        offsets until its producer is fenced. Under exactly-once the runtime then reads them
        again once the new tasks' producers are up and restores again a task whose offsets
        moved (`kstream.runtime.recovery`, `restore_again_if_committed_moved`)."""
        return self.enabled

    @property
    def delete_records(self) -> bool:
        """The broker implements DeleteRecords (repartition topics may be purged)."""
        return not self.enabled


KAFKA = BrokerCompat("none")
TANSU = BrokerCompat("tansu")


def compat_of(config: Config) -> BrokerCompat:
    """The compensations `config.broker_compat` asks for."""
    return TANSU if config.broker_compat == "tansu" else KAFKA


# --- high marks -----------------------------------------------------------------------------

Mark = tuple[str, str, int]
"""(input topic, source topic, source partition): one stream of provenance ids."""

_MARK = struct.Struct(">qIq")  # offset, output index, timestamp


class HighMarks:
    """Drops repeats of records kstream wrote, keeping one high mark per stream of ids.

    kstream writers emit the outputs of one source partition in its offset order (a task reads
    each partition in order and its producer keeps order per partition), so on one input topic
    the ids from one source partition only grow, and a repeat (a batch shown again after an
    aborted transaction, or written again after an at-least-once retry) is at or below the
    highest id seen. A mark per (input topic, source partition) stays small where a set of
    every id would grow with the input and cost a changelog record per record.
    """

    __slots__ = ("changed", "dropped", "marks")

    def __init__(self, marks: dict[Mark, tuple[int, int, int]] | None = None) -> None:
        # mark -> (offset, output index, timestamp of the record that set it)
        self.marks: dict[Mark, tuple[int, int, int]] = dict(marks or {})
        self.changed: dict[Mark, Any] = {}
        self.dropped = 0

    def admit(self, input_topic: str, value: bytes | None, timestamp: int, cause: Any) -> bool:
        """False for a repeat; True otherwise (and the mark moves up, remembering `cause`)."""
        src = decode(value)
        if src is None:
            return True
        mark = (input_topic, src.topic, src.partition)
        last = self.marks.get(mark)
        if last is not None and (src.offset, src.output_index) <= last[:2]:
            self.dropped += 1
            return False
        self.marks[mark] = (src.offset, src.output_index, timestamp)
        self.changed[mark] = cause
        return True

    def expire(self, before: int) -> list[Mark]:
        """Forget marks last moved by a record older than `before`; the ones forgotten."""
        gone = [m for m, v in self.marks.items() if v[2] < before]
        for m in gone:
            del self.marks[m]
            self.changed.pop(m, None)
        return gone


def marks_spec(subtopology: int) -> StoreSpec:
    """The store of a sub-topology's provenance high marks: `input|source topic|partition`
    -> offset, output index and the timestamp of the record that set it."""
    return stores.key_value(
        f"kstream-src-marks-{subtopology}", key_serde="string", value_serde="bytes"
    )


def marks_key(mark: Mark) -> str:
    inp, src, part = mark
    return f"{inp}|{src}|{part}"


def marks_value(marks: HighMarks, mark: Mark) -> bytes:
    return _MARK.pack(*marks.marks[mark])


def load_marks(store: Any) -> HighMarks:
    """The marks as the store holds them (as last committed)."""
    out: dict[Mark, tuple[int, int, int]] = {}
    with store.all() as cur:
        for key, value in cur:
            inp, src, part = key.rsplit("|", 2)
            out[(inp, src, int(part))] = _MARK.unpack(value)
    return HighMarks(out)
