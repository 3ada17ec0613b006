"""Many records in one Spark row: a task query's records cross Spark as Arrow blobs.

Every row Spark moves costs work per row on both sides: the JVM turns it into its own row
format and back, shuffles it, and `transformWithStateInPandas` hands rows to Python as pandas
frames, built row by row. A task query needs none of what a row buys (Spark never looks
inside a record), so its records travel packed:

- into a task: each Arrow batch a read task gets from Kafka (one partition's records) becomes
  one row `(partition, rows)`, `rows` the batch in Arrow's IPC format (`INPUT_SCHEMA`);
- out of a task (a stateful one, or a stateless sub-topology's read task) towards the sink:
  the outputs become one row per write slot `(slot, rows)` (`OUTPUT_SCHEMA`), the slot being
  the sink's (`kstream.spark.sink.slot_of` of the row's destination), so the shuffle to the
  slots moves a few rows per task.

Packing changes nothing a record carries or the order anything is written in: a task sorts its
input by partition and offset, and a write slot orders its rows itself (`sink.write_order`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from kstream.spark.sink import slot_of
from kstream.spark.wire import (
    ROW_ARROW_SCHEMA,
    SOURCE_ARROW_SCHEMA,
    SourceChunk,
    input_records,
    pack,
    unpack,
    unpack_output,
)

__all__ = [
    "INPUT_ARROW_SCHEMA",
    "INPUT_SCHEMA",
    "OUTPUT_SCHEMA",
    "output_batch",
    "pack",
    "pack_by_slot",
    "pack_input",
    "unpack",
    "unpack_input",
    "unpack_output",
]

INPUT_SCHEMA = "partition int, rows binary"
OUTPUT_SCHEMA = "slot int, rows binary"
INPUT_ARROW_SCHEMA = pa.schema([("partition", pa.int32()), ("rows", pa.binary())])


def pack_input(chunks: Iterable[SourceChunk]) -> Iterator[pa.RecordBatch]:
    """A read task's transform: each chunk it read (one Kafka partition's) as one row."""
    for c in chunks:
        b = c.arrow()
        if b.num_rows:
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([b.column("partition")[0].as_py()], pa.int32()),
                    pa.array([pack(b)], pa.binary()),
                ],
                schema=INPUT_ARROW_SCHEMA,
            )


def unpack_input(blobs: Iterable[bytes]) -> list[Any]:
    """The records of packed source batches (`pack_input`'s `rows`), key and value bytes."""
    out: list[Any] = []
    for blob in blobs:
        out.extend(input_records(unpack(blob, SOURCE_ARROW_SCHEMA)))
    return out


def pack_by_slot(cols: Mapping[str, Sequence[Any]], slots: int) -> dict[int, bytes]:
    """Output rows (columns of `ROW_ARROW_SCHEMA`) split by write slot, each slot's packed.

    The slot is `sink.slot_of(topic, part)` (rows without a known partition take the topic's
    first slot); each slot keeps the rows in the order given.
    """
    topics, parts = cols["topic"], cols["part"]
    if not topics:
        return {}
    known: dict[tuple[str, int | None], int] = {}
    slot_col = []
    for tp in zip(topics, parts, strict=True):
        s = known.get(tp)
        if s is None:
            s = known[tp] = slot_of(tp[0], -1 if tp[1] is None else tp[1], slots)
        slot_col.append(s)
    batch = pa.RecordBatch.from_pydict(dict(cols), schema=ROW_ARROW_SCHEMA)
    used = set(slot_col)
    if len(used) == 1:
        return {used.pop(): pack(batch)}
    idx: dict[int, list[int]] = {}
    for i, s in enumerate(slot_col):
        idx.setdefault(s, []).append(i)
    return {s: pack(batch.take(pa.array(rows, pa.int32()))) for s, rows in idx.items()}


def output_batch(packed: Mapping[int, bytes]) -> pa.RecordBatch:
    """`pack_by_slot`'s result as rows of `OUTPUT_SCHEMA`."""
    slots = sorted(packed)
    return pa.RecordBatch.from_arrays(
        [pa.array(slots, pa.int32()), pa.array([packed[s] for s in slots], pa.binary())],
        names=["slot", "rows"],
    )
