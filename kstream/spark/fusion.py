"""A repartition topic's hop done by Spark's own shuffle: two sub-topologies in one query.

A re-keying step followed by a stateful one (`group_by(...).count()`, a windowed aggregation
after `select_key`) compiles into two sub-topologies joined by a repartition topic, which
Kafka Streams writes and reads back. On Spark each sub-topology was a query of its own: the
first wrote the topic through its write slots (a transaction per slot and batch), the second
read it back, decoded it and shuffled it to its tasks. Spark already moves records between
its stages by key, so where nothing else writes or reads the topic the hop is Spark's shuffle:
the first sub-topology runs in the read tasks of the second's query and hands each record to
the task of the partition the repartition topic would have put it in.

`plan.fusable` says where (`TaskPlan.fused`): a stateful sub-topology whose only input is one
repartition topic, written by one stateless sub-topology (run in the read tasks) that writes
nothing but that topic, and read by nobody else. A task then sees what its partition of the
topic would have held, in the order the topic's write slot would have written it
(`slot_writer.write_order`: each upstream read task's records in its order, interleaved by
timestamp), so its results are those of the two queries. The records' offsets are their
positions in that sequence, counted per partition in the task's metadata (`fused_next`), since
no Kafka offset exists for them. What the upstream sends elsewhere (a dead-letter copy of a
record it could not read) passes through the task to the query's sink.

Exactly-once holds as for any query: the source offsets of the external topic and the task's
state are in one checkpoint, and the outputs are written by the sink's slots. A checkpoint
started before the hop was fused (the upstream sub-topology has a query checkpoint of its
own) keeps the two queries (`runner`), so what that query wrote and the next did not yet read
is not skipped.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from kstream.records import Record
from kstream.spark.packing import INPUT_ARROW_SCHEMA
from kstream.spark.plan import TaskPlan
from kstream.spark.slot_writer import ROW_TUPLE_FIELDS, row_tuples, write_order
from kstream.spark.wire import ROW_ARROW_SCHEMA, SourceChunk, decode_headers

__all__ = ["FusedInput", "fused_function", "fused_input"]


def fused_function(
    blob: bytes, upstream: int, sub: int
) -> Callable[[Iterator[SourceChunk]], Iterator[pa.RecordBatch]]:
    """The read tasks' function of a fused query: sub-topology `upstream` runs on each
    partition's records (as a stateless query's read tasks run it), and its outputs leave as
    input rows of `sub`'s tasks (`packing.INPUT_SCHEMA`), one per destination partition, each
    the pickled row tuples (`slot_writer.row_tuples`) in the order the upstream wrote them."""
    from kstream.spark.tasks import read_task_function

    def hand_over(plan: TaskPlan, part: int, cols: dict[str, list[Any]]) -> pa.RecordBatch:
        hop = set(plan.sources[sub])
        return _by_destination(cols, hop, part % max(plan.partitions[t] for t in hop))

    return read_task_function(blob, upstream, hand_over)


def _by_destination(cols: Mapping[str, list[Any]], hop: set[str], own: int) -> pa.RecordBatch:
    """Output rows, as `write_order`'s tuples, pickled per partition of the hop's topic they
    go to; rows for any other topic (a dead-letter copy) go with the upstream task's own
    partition's. Pickled tuples, not Arrow: the task wants Python objects back, and a pickle
    of tuples is made and read in fewer steps than ten Arrow columns built from Python lists
    and turned back into them."""
    dest: dict[int, list[tuple[Any, ...]]] = {}
    for row in row_tuples(cols):
        part = row[8]
        p = part if part is not None and row[5] in hop else own
        rows = dest.get(p)
        if rows is None:
            dest[p] = [row]
        else:
            rows.append(row)
    parts = sorted(dest)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(parts, pa.int32()),
            pa.array([pickle.dumps(dest[p], protocol=5) for p in parts], pa.binary()),
        ],
        schema=INPUT_ARROW_SCHEMA,
    )


class FusedInput:
    """A fused task's input of one batch: `records` for the task, and `passing` (columns of
    `wire.ROW_ARROW_SCHEMA`) for the query's sink as they are."""

    def __init__(self, records: list[Record], passing: dict[str, list[Any]]) -> None:
        self.records = records
        self.passing = passing


def fused_input(
    blobs: Iterable[bytes], hop: set[str], next_offset: dict[tuple[str, int], int]
) -> FusedInput:
    """The records a task reads through a fused hop, from its packed input rows.

    Blobs arrive in the shuffle's order; each holds what one upstream read task wrote for this
    task in order, so they are put in (upstream partition, first input offset) order, and the
    rows for each partition of the hop's topic in the order its write slot would write them
    (`write_order`). Each record's offset is the next of `next_offset` (updated)."""
    parts = [rows for rows in (pickle.loads(b) for b in blobs) if rows]
    parts.sort(key=_first_input)
    into: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    passing: dict[str, list[Any]] = {n: [] for n in ROW_ARROW_SCHEMA.names}
    for rows in parts:
        for row in rows:
            if row[8] is not None and row[5] in hop:
                tp = (row[5], row[8])
                got = into.get(tp)
                if got is None:
                    into[tp] = [row]
                else:
                    got.append(row)
            else:
                _pass_on(passing, row)
    records: list[Record] = []
    for tp in sorted(into):
        offset = next_offset.get(tp, 0)
        topic, part = tp
        for _pt, _pp, _po, _seq, k, _t, v, ts, _part, h in write_order(into[tp]):
            records.append(Record(k, v, ts, decode_headers(h), topic, part, offset))
            offset += 1
        next_offset[tp] = offset
    return FusedInput(records, passing)


def _pass_on(passing: dict[str, list[Any]], row: tuple[Any, ...]) -> None:
    """A row for the query's sink as it is, added to its columns."""
    for name, value in zip(ROW_TUPLE_FIELDS, row, strict=True):
        passing[name].append(value)


def _first_input(rows: list[tuple[Any, ...]]) -> tuple[int, int]:
    part, off = rows[0][1], rows[0][2]
    return (-1 if part is None else part, -1 if off is None else off)
