"""One write slot's writer on an executor: a Kafka transaction per (batch, slot).

`SlotWriter` writes the rows of one slot of a batch in the slot's own transaction, with the
batch id committed as the sink group's offset of marker partition `slot` in the same
transaction (`kstream.spark.sink` says why); a replayed slot at or below its committed marker
is skipped. A Python worker keeps its writers from batch to batch of a query's run
(`cached_writer`).

The same writer serves a stateful task that writes its own outputs (`by_task`: no topic it
writes is read back by the app, `kstream.spark.plan.tasks_write`): then the "slot" is the
task's partition, the batch id the task's own count of batches (kept in its state), and the
transactional id and marker group are the task's (`task_transactional_id`, `task_sink_group`),
so the two kinds of marker never mix.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.records import merge_by_head
from kstream.spark.wire import decode_headers
from kstream.state import provenance

__all__ = [
    "ROW_TUPLE_FIELDS",
    "SlotWriter",
    "cached_writer",
    "drop_writer",
    "marker_topic",
    "row_tuples",
    "sink_group",
    "slot_transactional_id",
    "task_sink_group",
    "task_transactional_id",
    "write_order",
]


def marker_topic(app_id: str) -> str:
    return f"{app_id}-spark-sink-batches"


def sink_group(app_id: str) -> str:
    return f"{app_id}-spark-sink"


def slot_transactional_id(app_id: str, slot: int) -> str:
    """The transactional id of a query's write slot: every writer of the slot, in any process
    and any run, uses it, so each fences the ones before it."""
    return f"{app_id}-spark-sink-{slot}"


def task_sink_group(app_id: str) -> str:
    """The group whose offsets on the marker topic say which batches each task has written
    itself (partition = the task's partition, offset = its batch count after the last one)."""
    return f"{app_id}-spark-task-sink"


def task_transactional_id(app_id: str, partition: int) -> str:
    """The transactional id of a query's task that writes its own outputs: every attempt of
    the task, in any process and any run, uses it, so each fences the ones before it."""
    return f"{app_id}-spark-task-{partition}"


ROW_TUPLE_FIELDS = ("ptopic", "ppart", "poff", "seq", "k", "topic", "v", "ts", "part", "h")
"""The columns (`wire.ROW_ARROW_SCHEMA`) of a row tuple (`row_tuples`, `write_order`), in order."""


def row_tuples(cols: Mapping[str, Sequence[Any]]) -> Iterator[tuple[Any, ...]]:
    """Rows given as columns (`wire.ROW_ARROW_SCHEMA`) as the tuples `write_order` takes."""
    n = len(cols["seq"])
    return zip(
        *(cols[name] for name in ROW_TUPLE_FIELDS[:-1]),
        cols.get("h") or [None] * n,
        strict=True,
    )


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


class SlotWriter:
    """Writes the rows of one slot of a batch, in an executor's Python worker.

    Its transactional id is the slot's, so a writer started for the slot fences any earlier
    one (a zombie of a lost executor cannot commit afterwards). A failed attempt is retried
    once with new clients, after re-reading the marker (`retries` counts those writes; the
    failed attempt's time is in that write's `open_ms`).

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
        by_task: bool = False,
    ) -> None:
        """`by_task`: `slot` is a task's partition, writing its own outputs (module doc)."""
        self.app_id = app_id
        self.provenance = provenance
        self.by_task = by_task
        self.supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
        self.bootstrap_servers = bootstrap_servers
        self.kafka = dict(kafka)
        self.slot = slot
        self.transactional = guarantee == "exactly_once"
        self._producer: Any = None
        self._consumer: Any = None
        # a token of the current producer (`owner`)
        self._owner: str | None = None
        # the marker this writer's producer committed last (None: not known, read it)
        self._last: int | None = None
        # the last write's own timers, in ms: clients and marker, produce, commit
        self.timings: dict[str, float] = {}
        # writes that needed a second attempt (most often: the producer was fenced)
        self.retries = 0

    @property
    def owner(self) -> str | None:
        """A token of this writer's current producer (None: none started yet). A task that
        writes its own outputs keeps the token of the producer that wrote its last batch: when
        that is another worker's, this one's producer has been fenced since (`renew_producer`)."""
        return self._owner

    def renew_producer(self) -> None:
        """Let the producer go, fenced or known to be, keeping the consumer (it only reads the
        marker and gives the group's metadata): the next write starts a new producer, which
        fences every other of the transactional id, and reads the marker. Starting only a
        producer saves the consumer's start and its coordinator lookup."""
        self._last = None
        self._owner = None
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=1.0)
            except Exception:
                pass

    def _fenced(self) -> bool:
        check = getattr(self._producer, "fenced", None)
        return bool(check()) if callable(check) else False

    def _clients(self) -> tuple[Any, Any]:
        if self._producer is None:
            self._owner = uuid.uuid4().hex
            self._producer = self.supplier.producer(
                ClientConfig(
                    self.bootstrap_servers,
                    self.kafka,
                    transactional_id=self.transactional_id if self.transactional else None,
                )
            )
        if self._consumer is None and self.transactional:
            group = task_sink_group(self.app_id) if self.by_task else sink_group(self.app_id)
            self._consumer = self.supplier.consumer(
                ClientConfig(self.bootstrap_servers, self.kafka, group_id=group)
            )
        return self._producer, self._consumer

    @property
    def transactional_id(self) -> str:
        if self.by_task:
            return task_transactional_id(self.app_id, self.slot)
        return slot_transactional_id(self.app_id, self.slot)

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
        rows = write_order(row_tuples(cols))
        t0 = time.perf_counter()
        try:
            return self._attempt(rows, batch_id)
        except Exception:
            if self._fenced():
                self.renew_producer()  # another writer of the slot started since
            else:
                self.close(abort=True)
            self.retries += 1
            failed_ms = (time.perf_counter() - t0) * 1e3
            n = self._attempt(rows, batch_id)
            # the failed attempt (a fenced producer's marker, its abort and close) is part of
            # opening the slot: without it the timer shows only the new producer's start
            self.timings["open_ms"] = self.timings.get("open_ms", 0.0) + failed_ms
            return n

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
        self._owner = None
        producer, self._producer = self._producer, None
        consumer, self._consumer = self._consumer, None
        for client in (producer, consumer):
            if client is not None:
                try:
                    client.close(**({"timeout": 1.0} if abort and client is producer else {}))
                except Exception:
                    if not abort:
                        raise


# A writer its worker has not used for this long is closed when the worker next asks for one.
# A Python worker Spark reuses serves query after query (the Spark oracle lane runs hundreds of
# apps in a session), and each writer holds a producer and a consumer with their sockets and
# pipes: kept for good, they gathered past 1,024 files in one worker. A query's writer is used
# every batch, so only one whose batches come more than this apart starts its clients again.
IDLE_WRITER_S = 60.0

_WRITERS: dict[tuple[str, str, int, bool], tuple[str, SlotWriter, float]] = {}


def cached_writer(
    run: str,
    app_id: str,
    bootstrap_servers: str,
    kafka: Mapping[str, Any],
    slot: int,
    guarantee: str,
    client_supplier: ClientSupplier | None,
    provenance: bool = False,
    by_task: bool = False,
    now: float | None = None,
) -> SlotWriter:
    """This Python worker's writer of `slot` (a task's partition: `by_task`) for the sink
    `run` (one per started query): made on first use, kept across the run's batches. A writer
    of another run of the same slot is closed: a query restarted from its checkpoint (or a new
    one, the app's marker offsets reset) reads the marker again rather than trust what an
    earlier run committed. Writers idle for `IDLE_WRITER_S` are closed (`now`: the monotonic
    clock's time, for tests)."""
    now = time.monotonic() if now is None else now
    key = (app_id, bootstrap_servers, slot, by_task)
    for other, (_, idle, used) in list(_WRITERS.items()):
        if other != key and now - used > IDLE_WRITER_S:
            del _WRITERS[other]
            idle.close(abort=True)  # between transactions: nothing is lost, errors are moot
    got = _WRITERS.get(key)
    if got is not None and got[0] == run:
        _WRITERS[key] = (run, got[1], now)
        return got[1]
    if got is not None:
        del _WRITERS[key]
        got[1].close(abort=True)
    w = SlotWriter(
        app_id, bootstrap_servers, kafka, slot, guarantee, client_supplier, provenance, by_task
    )
    _WRITERS[key] = (run, w, now)
    return w


def drop_writer(writer: SlotWriter) -> None:
    """Close `writer` and forget it (after a failure its clients are not trusted again)."""
    for key, (_, w, _) in list(_WRITERS.items()):
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
