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
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from kstream.kafka.partitioner import default_partition
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.records import merge_by_head
from kstream.spark.wire import ROW_ARROW_SCHEMA, decode_headers, unpack
from kstream.state import provenance

COLUMNS = ("ptopic", "ppart", "poff", "seq", "k", "topic", "v", "ts", "part", "h")
TIMERS = ("open_ms", "produce_ms", "commit_ms")
RESULT_SCHEMA = "slot int, written long, skipped boolean, " + ", ".join(
    f"{t} double" for t in TIMERS
)
GUARANTEES = ("exactly_once", "at_least_once")


def marker_topic(app_id: str) -> str:
    return f"{app_id}-spark-sink-batches"


def sink_group(app_id: str) -> str:
    return f"{app_id}-spark-sink"


def slot_transactional_id(app_id: str, slot: int) -> str:
    """The transactional id of a query's write slot: every writer of the slot, in any process
    and any run, uses it, so each fences the ones before it."""
    return f"{app_id}-spark-sink-{slot}"


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


def write_order(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A slot's rows in the order they are written: deterministic, so a replay is the same.

    Rows are `(ptopic, ppart, poff, seq, k, topic, v, ts, part, headers)`, each producing
    task's rows in the order the task wrote them (`slot_rows`): a task is one partition of the
    query's sub-topology (`ppart`: every input of a task has its partition number), and what it
    wrote is in the order it processed its records (across its input topics, merged by
    timestamp as a Kafka Streams task merges them), which is what Kafka Streams writes. Tasks
    are interleaved by timestamp, each next row taken from the task whose head is oldest (ties
    to the lower partition), as a Kafka Streams task picks its next record from the partitions
    it reads.
    """
    groups: dict[Any, list[tuple[Any, ...]]] = {}
    for r in rows:
        g = groups.get(r[1])
        if g is None:
            groups[r[1]] = [r]
        else:
            g.append(r)
    return merge_by_head(
        [groups[p] for p in sorted(groups, key=lambda p: -1 if p is None else p)],
        lambda r: r[7],
    )


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


class SlotWriter:
    """Writes the rows of one slot of a batch, in an executor's Python worker.

    Its transactional id is the slot's, so a writer started for the slot fences any earlier
    one (a zombie of a lost executor cannot commit afterwards). A failed attempt is retried
    once with new clients, after re-reading the marker.

    A writer is kept per Python worker and slot (`cached_writer`) and reused batch after
    batch: starting a transactional producer (InitProducerId), a consumer for the group's
    metadata, and reading the marker cost round trips every batch paid. While its producer is
    not fenced, no other writer has started with the slot's transactional id since its last
    commit, so the marker is the one it committed itself (`_last`) and is not read again (on
    Apache Kafka; under `broker_compat`, whose broker may not fence, it is read every batch). Each
    transaction sends the marker offset first, before any row: a producer fenced meanwhile (the
    slot was written by another worker) fails there, having produced nothing, and the retry
    starts a new one and reads the marker.
    """

    def __init__(
        self,
        app_id: str,
        bootstrap_servers: str,
        kafka: Mapping[str, Any],
        slot: int,
        guarantee: str = "exactly_once",
        client_supplier: ClientSupplier | None = None,
        provenance: bool = False,
    ) -> None:
        self.app_id = app_id
        self.provenance = provenance
        self.supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
        self.bootstrap_servers = bootstrap_servers
        self.kafka = dict(kafka)
        self.slot = slot
        self.transactional = guarantee == "exactly_once"
        self._producer: Any = None
        self._consumer: Any = None
        # the marker this writer's producer committed last (None: not known, read it)
        self._last: int | None = None
        # the last write's own timers, in ms: clients and marker, produce, commit
        self.timings: dict[str, float] = {}

    def _clients(self) -> tuple[Any, Any]:
        if self._producer is None:
            self._producer = self.supplier.producer(
                ClientConfig(
                    self.bootstrap_servers,
                    self.kafka,
                    transactional_id=(
                        slot_transactional_id(self.app_id, self.slot)
                        if self.transactional
                        else None
                    ),
                )
            )
        if self._consumer is None and self.transactional:
            self._consumer = self.supplier.consumer(
                ClientConfig(self.bootstrap_servers, self.kafka, group_id=sink_group(self.app_id))
            )
        return self._producer, self._consumer

    def committed(self) -> int:
        """The slot's marker: batches up to it (exclusive) are written or had no rows here."""
        from confluent_kafka import TopicPartition

        _, consumer = self._clients()
        tp = consumer.committed([TopicPartition(marker_topic(self.app_id), self.slot)])[0]
        return max(int(tp.offset), 0)

    def write(self, cols: Mapping[str, list[Any]], batch_id: int) -> int:
        """Write the rows once; the number written, or -1 if the slot had written this batch."""
        n = len(cols["seq"])
        self.timings = {"open_ms": 0.0, "produce_ms": 0.0, "commit_ms": 0.0}
        if not n:
            return 0
        rows = write_order(
            zip(
                cols["ptopic"],
                cols["ppart"],
                cols["poff"],
                cols["seq"],
                cols["k"],
                cols["topic"],
                cols["v"],
                cols["ts"],
                cols["part"],
                cols.get("h") or [None] * n,
                strict=True,
            )
        )
        try:
            return self._attempt(rows, batch_id)
        except Exception:
            self.close(abort=True)
            return self._attempt(rows, batch_id)

    def _attempt(self, rows: list[tuple[Any, ...]], batch_id: int) -> int:
        from confluent_kafka import TopicPartition

        t0 = time.perf_counter()
        producer, consumer = self._clients()
        if not self.transactional:
            t1 = time.perf_counter()
            _produce_all(producer, rows, self.provenance)
            t2 = time.perf_counter()
            producer.flush()
            self._timed(t0, t1, t2)
            return len(rows)
        # under broker_compat the broker may not fence an older producer of the id, so the
        # writer's own last marker proves nothing there: read it every batch
        own = None if self.provenance else self._last
        marker = own if own is not None else self.committed()
        if batch_id < marker:
            self._last = marker
            return -1
        producer.begin()
        try:
            # the marker first: a fenced producer fails here, before producing anything
            producer.send_offsets(
                [TopicPartition(marker_topic(self.app_id), self.slot, batch_id + 1)],
                consumer.consumer_group_metadata(),
            )
            t1 = time.perf_counter()
            _produce_all(producer, rows, self.provenance)
            t2 = time.perf_counter()
            producer.commit()
        except BaseException:
            self._last = None
            if producer.in_transaction:
                try:
                    producer.abort()
                except Exception:
                    pass
            raise
        self._last = batch_id + 1
        self._timed(t0, t1, t2)
        return len(rows)

    def _timed(self, t0: float, t1: float, t2: float) -> None:
        t3 = time.perf_counter()
        self.timings = {
            "open_ms": (t1 - t0) * 1e3,
            "produce_ms": (t2 - t1) * 1e3,
            "commit_ms": (t3 - t2) * 1e3,
        }

    def close(self, abort: bool = False) -> None:
        self._last = None
        producer, self._producer = self._producer, None
        consumer, self._consumer = self._consumer, None
        for client in (producer, consumer):
            if client is not None:
                try:
                    client.close(**({"timeout": 1.0} if abort and client is producer else {}))
                except Exception:
                    if not abort:
                        raise


_WRITERS: dict[tuple[str, str, int], tuple[str, SlotWriter]] = {}


def cached_writer(
    run: str,
    app_id: str,
    bootstrap_servers: str,
    kafka: Mapping[str, Any],
    slot: int,
    guarantee: str,
    client_supplier: ClientSupplier | None,
    provenance: bool = False,
) -> SlotWriter:
    """This Python worker's writer of `slot` for the sink `run` (one per started query): made
    on first use, kept across the run's batches. A writer of another run of the same slot is
    closed: a query restarted from its checkpoint (or a new one, the app's marker offsets
    reset) reads the marker again rather than trust what an earlier run committed."""
    key = (app_id, bootstrap_servers, slot)
    got = _WRITERS.get(key)
    if got is not None and got[0] == run:
        return got[1]
    if got is not None:
        del _WRITERS[key]
        got[1].close(abort=True)
    w = SlotWriter(app_id, bootstrap_servers, kafka, slot, guarantee, client_supplier, provenance)
    _WRITERS[key] = (run, w)
    return w


def drop_writer(writer: SlotWriter) -> None:
    """Close `writer` and forget it (after a failure its clients are not trusted again)."""
    for key, (_, w) in list(_WRITERS.items()):
        if w is writer:
            del _WRITERS[key]
    writer.close(abort=True)


def _produce_all(producer: Any, rows: list[tuple[Any, ...]], stamp: bool) -> None:
    """Every row with the record's own headers, in order, plus (`stamp`) its provenance id.

    Rows carry their rank among their input record's outputs in place of `seq` (`ranks`).
    """
    raw = producer.raw.produce
    encode, header = provenance.encode, provenance.HEADER
    for pt, pp, po, rank, k, topic, v, ts, part, hs in rows:
        hdrs: list[tuple[str, Any]] | None
        if stamp:
            hdrs = [(header, encode(pt, pp, po, rank))]
            if hs is not None:
                hdrs = [h for h in decode_headers(hs) if h[0] != header] + hdrs
        else:
            hdrs = None if hs is None else decode_headers(hs)
        try:
            if part is None:
                raw(topic, v, k, timestamp=ts or 0, headers=hdrs)
            else:
                raw(topic, v, k, partition=part, timestamp=ts or 0, headers=hdrs)
        except Exception:  # a full queue: drained and retried; or raised as kstream's error
            producer.produce(topic, v, k, partition=part, timestamp=ts, headers=hdrs)


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
    ) -> None:
        """`client_supplier`: where the writers' clients come from (None: Kafka's; it must
        pickle, as it goes to the executors). `provenance`: stamp each record's provenance id
        (`broker_compat` on)."""
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


def committed_batches(
    bootstrap_servers: str,
    app_id: str,
    kafka: Mapping[str, Any] | None = None,
    client_supplier: ClientSupplier | None = None,
) -> int:
    """The highest batch count any slot of `app_id`'s sink has committed."""
    from confluent_kafka import TopicPartition

    supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
    c = supplier.consumer(
        ClientConfig(bootstrap_servers, dict(kafka or {}), group_id=sink_group(app_id))
    )
    try:
        parts = c.partitions_for(marker_topic(app_id))
        tps = c.committed([TopicPartition(marker_topic(app_id), p) for p in parts])
    finally:
        c.close()
    return max((max(int(tp.offset), 0) for tp in tps), default=0)
