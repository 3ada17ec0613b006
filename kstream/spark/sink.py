"""The Kafka sink of the Spark runner: `foreachBatch`, idempotent per batch id.

Spark replays a failed micro-batch with the same offsets and may call the sink again for a
batch whose output already reached Kafka (a crash between the sink and Spark's commit log). So
each batch is written in one Kafka transaction that also commits the batch id as the offset of
a marker partition for the sink's own consumer group: the broker applies that offset only when
the transaction commits, so "is batch N written?" has an exact answer, and a batch at or below
the committed marker is skipped.

Every record carries the `kstream.src` provenance header, derived from the input record that
caused it and its rank among that record's outputs in the batch; a replayed batch yields the
same ids, so a kstream reader drops anything a broker shows twice (e.g. records of an aborted
transaction that a faulty broker still hands to read_committed readers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kstream.spark.order import merge_by_head, tp_order
from kstream.spark.source import decode_headers
from kstream.state import provenance

COLUMNS = ("ptopic", "ppart", "poff", "seq", "k", "topic", "v", "ts", "part", "h")


def marker_topic(app_id: str) -> str:
    return f"{app_id}-spark-sink-batches"


def sink_group(app_id: str) -> str:
    return f"{app_id}-spark-sink"


def write_order(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The batch's rows in the order they are written: deterministic, so a replay is the same.

    Rows are `(ptopic, ppart, poff, seq, k, topic, v, ts, part, headers)`. What one input
    partition caused stays in its order (input offset, then rank); input partitions are
    interleaved by timestamp, each next row taken from the partition whose head is oldest, as a
    Kafka Streams task picks its next record. So a repartition topic written from several
    partitions is in time order where its inputs were.
    """
    groups: dict[tuple[Any, Any], list[tuple[Any, ...]]] = {}
    for r in rows:
        g = groups.get((r[0], r[1]))
        if g is None:
            groups[(r[0], r[1])] = [r]
        else:
            g.append(r)
    for g in groups.values():
        g.sort(key=_input_order)
    return merge_by_head([groups[tp] for tp in sorted(groups, key=tp_order)], lambda r: r[7])


def _input_order(r: tuple[Any, ...]) -> tuple[Any, ...]:
    return (r[2], r[3], r[4] or b"")


class TransactionalSink:
    """`foreachBatch` callable; runs on the driver, one transaction per non-empty batch."""

    def __init__(
        self, app_id: str, bootstrap_servers: str, kafka: Mapping[str, Any] | None = None
    ) -> None:
        self.app_id = app_id
        self.bootstrap_servers = bootstrap_servers
        self.kafka = dict(kafka or {})
        self._producer: Any = None
        self._consumer: Any = None
        self.batches_written = 0
        self.batches_skipped = 0
        self.records_written = 0

    def _clients(self) -> tuple[Any, Any]:
        from kstream.kafka.consumer import Consumer
        from kstream.kafka.producer import Producer

        if self._consumer is None:
            self._consumer = Consumer(
                self.bootstrap_servers, group_id=sink_group(self.app_id), kafka=self.kafka
            )
        if self._producer is None:
            self._producer = Producer(
                self.bootstrap_servers,
                kafka=self.kafka,
                transactional_id=f"{self.app_id}-spark-sink",
            )
        return self._producer, self._consumer

    def committed_batches(self) -> int:
        """How many batches (0..N-1) are known to be written."""
        from confluent_kafka import TopicPartition

        _, consumer = self._clients()
        tp = consumer.committed([TopicPartition(marker_topic(self.app_id), 0)])[0]
        return max(int(tp.offset), 0)

    def __call__(self, df: Any, batch_id: int) -> None:
        self.write(df.select(*COLUMNS).toArrow().to_pydict(), batch_id)

    def write(self, cols: Mapping[str, list[Any]], batch_id: int) -> None:
        from confluent_kafka import TopicPartition

        producer, consumer = self._clients()
        n = len(cols["seq"])
        if not n:
            return
        if batch_id < self.committed_batches():
            self.batches_skipped += 1
            return
        headers = cols.get("h") or [None] * n
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
                headers,
                strict=True,
            )
        )
        producer.begin()
        try:
            self._produce_all(producer, rows)
            meta = consumer.consumer_group_metadata()
            producer.send_offsets(
                [TopicPartition(marker_topic(self.app_id), 0, batch_id + 1)], meta
            )
            producer.commit()
        except BaseException:
            if producer.in_transaction:
                try:
                    producer.abort()
                except Exception:
                    pass
            raise
        self.batches_written += 1
        self.records_written += len(rows)

    @staticmethod
    def _produce_all(producer: Any, rows: list[tuple[Any, ...]]) -> None:
        """Every row with its provenance id (+ the record's own headers), in order."""
        raw = producer.raw.produce
        encode, header = provenance.encode, provenance.HEADER
        prev: tuple[Any, Any, Any] | None = None
        index = 0
        for pt, pp, po, _seq, k, topic, v, ts, part, hs in rows:
            here = (pt, pp, po)
            index = index + 1 if here == prev else 0
            prev = here
            hdrs = [(header, encode(pt, pp, po, index))]
            if hs is not None:
                hdrs = [h for h in decode_headers(hs) if h[0] != header] + hdrs
            try:
                if part is None:
                    raw(topic, v, k, timestamp=ts or 0, headers=hdrs)
                else:
                    raw(topic, v, k, partition=part, timestamp=ts or 0, headers=hdrs)
            except Exception:  # a full queue: drained and retried; or raised as kstream's error
                producer.produce(topic, v, k, partition=part, timestamp=ts, headers=hdrs)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
            self._producer = None
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
