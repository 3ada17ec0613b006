"""Global stores: every instance holds all partitions of each global table.

A consumer without a group is assigned every partition of the global topics, reads them to
their end (partition EOF, never ListOffsets) before the stream thread processes anything, and
then takes what arrived between batches, so lookups see a table that is at most one batch
behind.

Checkpoints (Kafka's `global/.checkpoint`): every write to the global stores carries the next
offset of each global partition in the same atomic backend write, so a persistent store (LMDB)
knows how far it got and a restart reads only what is new. Reading starts there only when every
global store holds the same checkpoint and it lies within each partition's log (log start to
log end); otherwise (a memory store, a new or wiped store, a topic that was recreated or whose
old records were deleted past the checkpoint) the stores are wiped and read from the beginning,
as Kafka Streams wipes and restores a global store whose checkpoint is out of range.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from kstream.config import Config
from kstream.errors import KafkaClientError, StoreError
from kstream.kafka.read_to_end import ReadToEndTimeout, read_to_end
from kstream.kafka.supplier import ClientConfig, ClientSupplier, KafkaClientSupplier
from kstream.records import KAFKA_TIMESTAMP_TYPES, Headers, Record
from kstream.topology.compiled import CompiledTopology
from kstream.topology.task import Task

log = logging.getLogger("kstream.runtime")

#: the key of the global partitions' next offsets in each global store's checkpoint
CHECKPOINT_KEY = "global_offsets"


class _NoOutput:
    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers,
        partition: int | None,
    ) -> None:
        raise StoreError(f"a global store processor may not forward records (to {topic!r})")

    def partitions_for(self, topic: str) -> int:
        return 1


class GlobalStores:
    """The instance's global stores and the consumer that keeps them current."""

    def __init__(
        self,
        compiled: CompiledTopology,
        config: Config,
        app_id: str,
        bootstrap_servers: str,
        client_supplier: ClientSupplier | None = None,
        kafka: Mapping[str, Any] | None = None,
    ) -> None:
        """`kafka`: the consumer's librdkafka settings (default `config.kafka`; the stream
        thread passes its own consumer's, whose fetch wait matches the batch wait)."""
        self._compiled, self._app_id, self._config = compiled, app_id, config
        self.task = self._new_task()
        self.views: dict[str, Any] = {n: s.read_only() for n, s in self.task.stores.items()}
        self._offsets: dict[tuple[str, int], int] = {}
        #: records read by `bootstrap` (from the checkpoint, or from the beginning)
        self.bootstrapped = 0
        supplier = client_supplier if client_supplier is not None else KafkaClientSupplier()
        self.consumer = supplier.global_consumer(
            ClientConfig(
                bootstrap_servers,
                dict(config.kafka if kafka is None else kafka),
                config.connect_timeout,
            )
        )
        self._tps: list[tuple[str, int]] = []
        for topic in compiled.global_topics:
            parts = self.consumer.partitions_for(topic)
            if not parts:
                raise StoreError(f"global table topic {topic!r} does not exist")
            self._tps += [(topic, p) for p in parts]
        self._batch = config.batch_max_records
        #: a poll raised: the next one first seeks back to what was applied (`poll`)
        self._rewind = False

    def _new_task(self) -> Task:
        return Task(
            self._compiled,
            None,
            0,
            collector=_NoOutput(),
            app_id=self._app_id,
            state_dir=self._config.state_dir,
            default_backend=self._config.default_backend,
        )

    def bootstrap(self, stop: Any = None, idle_timeout: float = 60.0) -> None:
        """Assign every global partition from its checkpoint (or its beginning, after wiping
        the stores: module docstring) and read it to its end (partition EOF:
        kstream.kafka.read_to_end) before processing starts; `poll` follows from there. A
        client error (a dropped connection) is retried, as Kafka Streams' global thread
        retries, until `idle_timeout` passes without a record applied."""
        checkpoint = self._usable_checkpoint()
        if checkpoint is None:
            self._wipe()
            starts = dict.fromkeys(self._tps, OFFSET_BEGINNING)
        else:
            starts = dict(checkpoint)
            self._offsets = dict(checkpoint)
        log.info("global stores: reading %s", starts if checkpoint else "from the beginning")
        began, at = time.monotonic(), self.bootstrapped
        while True:
            # after a client error, the read starts again from the offsets after the records
            # applied (as `poll` does): the failed batch may have taken records it never gave
            reading = {tp: self._offsets.get(tp, start) for tp, start in starts.items()}
            try:
                for batch in read_to_end(
                    self.consumer,
                    reading,
                    max_records=self._batch,
                    poll_s=0.2,
                    idle_timeout=idle_timeout,
                    stop=stop,
                ):
                    self.bootstrapped += self._apply(batch.messages)
                return
            except ReadToEndTimeout:
                raise StoreError(
                    f"global stores: no progress reading {self._tps} for {idle_timeout:g}s"
                ) from None
            except KafkaClientError as e:
                if self.bootstrapped > at:
                    began, at = time.monotonic(), self.bootstrapped
                if time.monotonic() - began > idle_timeout:
                    raise StoreError(
                        f"global stores: no progress reading {self._tps} for {idle_timeout:g}s: {e}"
                    ) from e
                log.warning("global stores: %s (reading on from what was applied)", e)
                time.sleep(0.2)

    def _usable_checkpoint(self) -> dict[tuple[str, int], int] | None:
        """The stores' common checkpoint if it covers every global partition and lies within
        each partition's log; None otherwise (the stores are then rebuilt)."""
        found = [s.checkpoint().get(CHECKPOINT_KEY) for s in self.task.stores.values()]
        if not found or found[0] is None or any(cp != found[0] for cp in found):
            return None
        offsets = {(str(t), int(p)): int(o) for t, p, o in found[0]}
        if set(offsets) != set(self._tps):
            return None
        for (topic, part), off in offsets.items():
            low, high = self._watermarks(topic, part)
            if not low <= off <= high:
                log.warning(
                    "global stores: checkpoint %d of topic %r partition %d is outside its log "
                    "[%d, %d]; wiping the global stores and reading from the beginning",
                    off,
                    topic,
                    part,
                    low,
                    high,
                )
                return None
        return offsets

    def _watermarks(self, topic: str, part: int) -> tuple[int, int]:
        wm = self.consumer.get_watermark_offsets(TopicPartition(topic, part), cached=False)
        if wm is None:
            raise StoreError(f"global stores: no log offsets for {topic!r} partition {part}")
        return int(wm[0]), int(wm[1])

    def _wipe(self) -> None:
        """Empty every global store (a fresh task over destroyed backends), keeping `views`
        (already handed to the stream thread's tasks) pointed at the new stores."""
        if not any(s.checkpoint() for s in self.task.stores.values()):
            return  # nothing was ever written (a first start, memory stores)
        for store in self.task.stores.values():
            store.destroy()
        self.task = self._new_task()
        self.views.clear()
        self.views.update({n: s.read_only() for n, s in self.task.stores.items()})

    def poll(self, timeout: float = 0.0) -> int:
        """Apply what has arrived; returns the number of records (0 after a client error).

        The consume raises `KafkaClientError` for a partition error reported in the batch
        (e.g. a dropped connection) and for librdkafka's KafkaException, as the stream
        thread's own consumer does, whose poll logs it and goes on: the client reconnects by
        itself, and Kafka Streams' global thread retries too. Raising here would end the
        stream thread over a passing error. So the error is logged and the next poll goes
        on, first seeking every global partition back
        to the offset after the last record applied: a batch that raised may have moved the
        consumer past records it never returned (those before the error in the batch), which
        would otherwise be missing from the stores for good."""
        try:
            if self._rewind:
                for topic, part in self._tps:
                    self.consumer.seek(
                        topic, part, self._offsets.get((topic, part), OFFSET_BEGINNING)
                    )
                self._rewind = False
            msgs = self.consumer.consume_batch(self._batch, timeout)
        except KafkaClientError as e:
            log.warning("global stores: %s (retrying at the next poll)", e)
            self._rewind = True
            return 0
        return self._apply(msgs)

    def _apply(self, msgs: list[Any]) -> int:
        if not msgs:
            return 0
        by_topic: dict[str, list[Record]] = {}
        offsets = self._offsets
        for m in msgs:
            topic, part, off = m.topic() or "", m.partition() or 0, m.offset() or 0
            by_topic.setdefault(topic, []).append(_record(m, topic, part, off))
            offsets[(topic, part)] = off + 1
        for recs in by_topic.values():
            self.task.process(recs)
        cp = {CHECKPOINT_KEY: sorted([t, p, o] for (t, p), o in offsets.items())}
        self.task.flush_stores(dict.fromkeys(self.task.stores, cp))
        return len(msgs)

    def close(self) -> None:
        try:
            self.consumer.close()
        finally:
            self.task.close()


def _headers(m: Any) -> Any:
    return m.headers() or ()


def _record(m: Any, topic: str, part: int, off: int) -> Record:
    """A global topic's message as a record, its timestamp type kept (LogAppendTime: the
    broker's time)."""
    ts_type, ts = m.timestamp()
    return Record(
        m.key(), m.value(), ts, _headers(m), topic, part, off, KAFKA_TIMESTAMP_TYPES[ts_type]
    )
