"""The Kafka sink of the Spark runner: written from the executors, idempotent per (batch, slot).

Spark replays a failed micro-batch with the same offsets and may call the sink again for a
batch whose output already reached Kafka (a crash between the sink and Spark's commit log), or
retry one write task whose executor died. So a batch's rows are split into a fixed number of
write slots by the partition they go to (all rows for one topic partition in one slot, so a
partition gets its rows in the batch's write order, as from one writer), and each slot is
written by one executor task in a Kafka transaction of its own, with its own transactional id.
Inside that transaction the task commits the batch id as the sink group's offset of marker
partition `slot`: the broker applies that offset only when the transaction commits, so "is slot
i of batch N written?" has an exact answer, and a replayed slot at or below its committed
marker is skipped. The slot count is the marker topic's partition count, fixed when the topic
is created, so a replay maps rows to the same slots. The driver only sees one small row per
slot: records never pass through it.

With `broker_compat` on (`provenance=True`), every record carries the `kstream.src` provenance
header, derived from the input record that caused it and its rank among that record's outputs
in the batch; a replayed batch yields the same ids, so a kstream reader drops anything a broker
shows twice (records of an aborted transaction that a broker such as Tansu still hands to
read_committed readers). On Apache Kafka no header is needed: a slot's rows are one
transaction, a replayed slot is skipped by its marker, and read_committed readers never see an
aborted one (docs/spark.md, "Exactly-once"). Within a partition, what one input partition
caused is in input order, as kstream writers keep it.

With the `at_least_once` guarantee the slots write without transactions or markers: a replayed
batch is written again.

Why a shuffle to write slots rather than each task writing its own outputs (as a Kafka Streams
task does, committing its input offsets in its transaction, which would save the batch a stage):
a partition that several tasks write to would get each task's rows of the batch as one run,
where the slot merges them by timestamp. In a repartition topic that order is what the next
sub-topology processes: a stream-table join downstream would see a table update before older
stream records of the other task (the orders-enriched example gives other results).

Where the app reads none of the topics a stateful query writes (`plan.tasks_write`), that order
is nobody's input, and its tasks do write their own outputs (`TaskWriter`), with no write-slot
stage: each task's rows of a batch are one transaction of the task's own transactional id,
which commits the task's batch count (kept in its Spark state, as Spark does not tell a
stateful processor the batch id) as the offset of marker partition `task` for the task sink
group. A replayed batch runs over the state its predecessor left, so it has the same count and
is skipped if written. The task hands the driver one small row (`WRITTEN_SLOT`) saying what it
wrote. A checkpoint whose batches were written through slots keeps them (`runner`).
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from kstream.kafka.partitioner import default_partition
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.spark.slot_writer import (
    SlotWriter,
    cached_writer,
    drop_writer,
    marker_topic,
    sink_group,
    slot_transactional_id,
    task_sink_group,
    write_order,
)
from kstream.spark.wire import ROW_ARROW_SCHEMA, unpack

__all__ = [
    "COLUMNS",
    "GUARANTEES",
    "RESULT_SCHEMA",
    "WRITTEN_SLOT",
    "SlotWriter",
    "TaskWriter",
    "TransactionalSink",
    "committed_batches",
    "destination",
    "ensure_marker_topic",
    "forget_markers",
    "marker_topic",
    "ranks",
    "sink_group",
    "slot_of",
    "slot_rows",
    "slot_transactional_id",
    "task_sink_group",
    "write_function",
    "write_order",
]

COLUMNS = ("ptopic", "ppart", "poff", "seq", "k", "topic", "v", "ts", "part", "h")
TIMERS = ("open_ms", "produce_ms", "commit_ms")
RESULT_SCHEMA = "slot int, written long, skipped boolean, " + ", ".join(
    f"{t} double" for t in TIMERS
)
GUARANTEES = ("exactly_once", "at_least_once")
# the slot of a task's row saying what it wrote itself (`TaskWriter`), packed by `written_row`
WRITTEN_SLOT = -1


def ensure_marker_topic(admin: Any, app_id: str, slots: int) -> int:
    """Create the marker topic with `slots` partitions unless it exists; its partition count."""
    topic = marker_topic(app_id)
    existing = admin.partition_counts([topic]).get(topic)
    if existing:
        return int(existing)
    admin.create_topic(topic, max(int(slots), 1), {"retention.ms": "-1"})
    return max(int(slots), 1)


def destination(
    topic: str, key: bytes | None, part: int | None, partitions: Mapping[str, int]
) -> int:
    """The partition a row goes to: its own, else its key's (murmur2, as kstream's producers
    place keys), else -1 (no key: the producer picks)."""
    if part is not None:
        return int(part)
    n = partitions.get(topic)
    if key is None or not n:
        return -1
    return default_partition(key, n)


def slot_of(topic: str, partition: int, slots: int) -> int:
    """The write slot of rows going to (`topic`, `partition`).

    A topic's partitions take consecutive slots from an offset given by the topic name's CRC-32
    (the same in every process), so they never share a slot while there are as many slots as
    partitions. Rows with no known partition go to the topic's first slot.
    """
    return (zlib.crc32(topic.encode()) + max(int(partition), 0)) % slots


def slot_rows(blobs: Iterable[bytes]) -> Any:
    """The rows of one write slot's packed outputs (`kstream.spark.packing`) as one table, in a
    deterministic order that keeps each producing task's rows in its own order: a packed blob
    holds what one task wrote for the slot, in order; blobs arrive in the shuffle's order, so
    they are put in (partition, first input offset) order (a read task of a stateless query
    hands a partition's outputs over in several blobs, in offset order)."""
    import pyarrow as pa

    tables = [unpack(b, ROW_ARROW_SCHEMA) for b in blobs]
    tables = [t for t in tables if t.num_rows]
    tables.sort(key=_first_input)
    return pa.Table.from_batches(tables, schema=ROW_ARROW_SCHEMA)


def _first_input(t: Any) -> tuple[int, int]:
    part, off = t.column("ppart")[0].as_py(), t.column("poff")[0].as_py()
    return (-1 if part is None else part, -1 if off is None else off)


def ranks(cols: Mapping[str, list[Any]]) -> list[int]:
    """Each row's rank among the outputs of its input record, in (seq, key, topic, value)
    order: the index of its provenance id (for rows written from this process, `write`)."""
    n = len(cols["seq"])
    order = sorted(
        range(n),
        key=lambda i: (
            cols["ptopic"][i],
            cols["ppart"][i],
            cols["poff"][i],
            cols["seq"][i],
            cols["k"][i] or b"",
            cols["topic"][i],
            cols["v"][i] or b"",
        ),
    )
    out = [0] * n
    prev: tuple[Any, Any, Any] | None = None
    rank = 0
    for i in order:
        here = (cols["ptopic"][i], cols["ppart"][i], cols["poff"][i])
        rank = rank + 1 if here == prev else 0
        prev = here
        out[i] = rank
    return out


def write_function(
    run: str,
    app_id: str,
    bootstrap_servers: str,
    kafka: Mapping[str, Any],
    guarantee: str,
    batch_id: int,
    client_supplier: ClientSupplier | None = None,
    provenance: bool = False,
) -> Any:
    """The `applyInArrow` function that writes one slot's rows on an executor (packed:
    `kstream.spark.packing.OUTPUT_SCHEMA`); `client_supplier` travels with it, pickled."""
    kafka = dict(kafka)

    def write(key: tuple[Any, ...], table: Any) -> Any:
        import pyarrow as pa

        slot = int(key[0].as_py())
        table = slot_rows(table.column("rows").to_pylist())
        # the worker's writer of the slot, kept across batches (`SlotWriter`)
        writer = cached_writer(
            run, app_id, bootstrap_servers, kafka, slot, guarantee, client_supplier, provenance
        )
        try:
            n = writer.write(table.select(list(COLUMNS)).to_pydict(), batch_id)
        except BaseException:
            drop_writer(writer)
            raise
        t = writer.timings
        return pa.table(
            {
                "slot": pa.array([slot], pa.int32()),
                "written": pa.array([max(n, 0)], pa.int64()),
                "skipped": pa.array([n < 0], pa.bool_()),
                **{k: pa.array([t.get(k, 0.0)], pa.float64()) for k in TIMERS},
            }
        )

    return write


def written_row(written: int, timings: Mapping[str, float]) -> bytes:
    """What a task wrote itself (-1: its batch was written before) and its write's timers."""
    return json.dumps({"written": written, **{t: timings.get(t, 0.0) for t in TIMERS}}).encode()


def read_written_row(blob: bytes) -> dict[str, float]:
    got: dict[str, float] = json.loads(blob)
    return got


class TaskWriter:
    """Where a stateful query's tasks write their own outputs (`plan.tasks_write`): what each
    task needs, pickled with its processor, for its worker's writer of the task
    (`cached_writer` with `by_task`)."""

    def __init__(self, app_id: str, guarantee: str, kafka: Mapping[str, Any]) -> None:
        """`app_id`: the query's (its marker topic's); `kafka`: the writers' client settings."""
        if guarantee not in GUARANTEES:
            raise ValueError(f"guarantee must be one of {GUARANTEES}, got {guarantee!r}")
        self.app_id = app_id
        self.guarantee = guarantee
        self.kafka = dict(kafka)
        # this query run's: a worker's writers of an earlier run are not trusted
        self.run = uuid.uuid4().hex

    def write(
        self,
        partition: int,
        cols: Mapping[str, list[Any]],
        batch: int,
        bootstrap_servers: str,
        client_supplier: ClientSupplier | None,
        provenance: bool,
        last_owner: str | None = None,
    ) -> tuple[bytes, str | None]:
        """Write task `partition`'s rows of its `batch`-th batch once: `written_row`, and the
        token of the producer that wrote them (`SlotWriter.owner`). `last_owner`: the token of
        the one that wrote the task's last batch; when that was another worker's (Spark gives
        a task any idle Python worker), this worker's producer of the task has been fenced
        since, and is renewed before the write rather than after a failed one."""
        writer = cached_writer(
            self.run,
            self.app_id,
            bootstrap_servers,
            self.kafka,
            partition,
            self.guarantee,
            client_supplier,
            provenance,
            by_task=True,
        )
        rows = {**cols, "h": cols.get("h") or [None] * len(cols["seq"])}
        if last_owner is not None and writer.owner not in (None, last_owner):
            writer.renew_producer()
        try:
            n = writer.write(rows, batch)
        except BaseException:
            drop_writer(writer)
            raise
        return written_row(n, writer.timings), writer.owner


class TransactionalSink:
    """`foreachBatch` callable: the driver plans the write, executor tasks do it per slot.

    `write` (rows given as columns) writes in this process instead, slot by slot, as the
    executors would: for tools and tests without a query.

    The batch comes as rows of `kstream.spark.packing.OUTPUT_SCHEMA`: each a slot's rows from
    one task, packed, with `seq` already the row's rank among its input record's outputs. The
    batch then goes to the slots in one shuffle of a few rows, with neither a window that
    ranks the rows nor a Python step that places them.
    """

    def __init__(
        self,
        app_id: str,
        bootstrap_servers: str,
        kafka: Mapping[str, Any] | None = None,
        *,
        slots: int = 1,
        partitions: Mapping[str, int] | None = None,
        guarantee: str = "exactly_once",
        client_supplier: ClientSupplier | None = None,
        provenance: bool = False,
        by_tasks: bool = False,
    ) -> None:
        """`client_supplier`: where the writers' clients come from (None: Kafka's; it must
        pickle, as it goes to the executors). `provenance`: stamp each record's provenance id
        (`broker_compat` on). `by_tasks`: the query's tasks write their own outputs
        (`TaskWriter`); the sink runs the batch and counts what they wrote."""
        if guarantee not in GUARANTEES:
            raise ValueError(f"guarantee must be one of {GUARANTEES}, got {guarantee!r}")
        self.app_id = app_id
        self.bootstrap_servers = bootstrap_servers
        self.kafka = dict(kafka or {})
        self.slots = max(int(slots), 1)
        self.partitions = dict(partitions or {})
        self.guarantee = guarantee
        self.client_supplier = client_supplier
        self.provenance = provenance
        self.by_tasks = by_tasks
        self._local: dict[int, SlotWriter] = {}
        # this sink's run (a query's start): the workers keep their writers per run
        self.run = uuid.uuid4().hex
        self.batches_written = 0
        self.batches_skipped = 0
        self.records_written = 0
        self.last_batch_records = 0
        # per batch, each written slot's own timers (`SlotWriter.timings`), the last 100
        self.timings: deque[list[dict[str, float]]] = deque(maxlen=100)

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.by_tasks:
            got = [read_written_row(r["rows"]) for r in df.collect() if r["slot"] == WRITTEN_SLOT]
            self._count([(max(int(g["written"]), 0), g["written"] < 0) for g in got])
            self.timings.append([{t: g[t] for t in TIMERS} for g in got if g["written"] > 0])
            return
        fn = write_function(
            self.run,
            self.app_id,
            self.bootstrap_servers,
            self.kafka,
            self.guarantee,
            batch_id,
            self.client_supplier,
            self.provenance,
        )
        results = df.groupBy("slot").applyInArrow(fn, RESULT_SCHEMA).collect()
        self._count([(int(r["written"]), bool(r["skipped"])) for r in results])
        self.timings.append(
            [{t: float(r[t]) for t in TIMERS} for r in results if int(r["written"]) > 0]
        )

    def _count(self, results: list[tuple[int, bool]]) -> None:
        if not results:
            self.last_batch_records = 0
            return
        written = sum(n for n, _ in results)
        self.last_batch_records = written
        self.records_written += written
        if all(skipped for _, skipped in results):
            self.batches_skipped += 1
        else:
            self.batches_written += 1

    def write(self, cols: Mapping[str, list[Any]], batch_id: int) -> None:
        """Write one batch from this process (the slots one after the other). The rows come in
        any order: each input partition's are written in input order (offset, then rank)."""
        n = len(cols["seq"])
        cols = {**cols, "seq": ranks(cols)}
        order = sorted(
            range(n),
            key=lambda i: (
                cols["ppart"][i] if cols["ppart"][i] is not None else -1,
                cols["ptopic"][i],
                cols["poff"][i],
                cols["seq"][i],
            ),
        )
        split: dict[int, list[int]] = {}
        for i in order:
            t, k, p = cols["topic"][i], cols["k"][i], cols["part"][i]
            split.setdefault(
                slot_of(t, destination(t, k, p, self.partitions), self.slots), []
            ).append(i)
        results = []
        for slot, idx in sorted(split.items()):
            part = {c: [cols[c][i] for i in idx] for c in COLUMNS if c in cols}
            if "h" not in part:
                part["h"] = [None] * len(idx)
            w = self._local.get(slot)
            if w is None:
                w = self._local[slot] = SlotWriter(
                    self.app_id,
                    self.bootstrap_servers,
                    self.kafka,
                    slot,
                    self.guarantee,
                    self.client_supplier,
                    self.provenance,
                )
            got = w.write(part, batch_id)
            results.append((max(got, 0), got < 0))
        if n:
            self._count(results)

    def committed_batches(self) -> int:
        """How many batches (0..N-1) are known to be written: the furthest slot's marker."""
        return committed_batches(
            self.bootstrap_servers, self.app_id, self.kafka, self.client_supplier
        )

    def close(self) -> None:
        for w in self._local.values():
            w.close()
        self._local.clear()


def forget_markers(
    bootstrap_servers: str,
    app_id: str,
    kafka: Mapping[str, Any] | None = None,
    client_supplier: ClientSupplier | None = None,
) -> list[str]:
    """Delete the marker groups of `app_id`'s sink (its write slots' and its tasks'); those
    that existed. For a query starting from a checkpoint that never logged a batch: its batch
    ids and its tasks' counts start again at 0, and markers an earlier checkpoint left would
    have its batches skipped as written, up to where that one had come."""
    supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
    admin = supplier.admin(ClientConfig(bootstrap_servers, dict(kafka or {})))
    try:
        deleted: list[str] = admin.delete_groups([sink_group(app_id), task_sink_group(app_id)])
        return deleted
    finally:
        admin.close()


def committed_batches(
    bootstrap_servers: str,
    app_id: str,
    kafka: Mapping[str, Any] | None = None,
    client_supplier: ClientSupplier | None = None,
    by_tasks: bool = False,
) -> int:
    """The highest batch count any slot of `app_id`'s sink has committed; with `by_tasks`, any
    of its tasks writing their own outputs (a task's count of the batches it ran, at most the
    query's)."""
    from confluent_kafka import TopicPartition

    supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
    group = task_sink_group(app_id) if by_tasks else sink_group(app_id)
    c = supplier.consumer(ClientConfig(bootstrap_servers, dict(kafka or {}), group_id=group))
    try:
        parts = c.partitions_for(marker_topic(app_id))
        tps = c.committed([TopicPartition(marker_topic(app_id), p) for p in parts])
    finally:
        c.close()
    return max((max(int(tp.offset), 0) for tp in tps), default=0)
