"""The stream thread: one consumer, the micro-batch loop, rebalances and the tasks' lifecycle.

Loop: consume up to `batch_max_records` (waiting at most `batch_max_wait`) -> group by task ->
one `process` per task -> wall-clock punctuation -> every `commit_interval`, commit. A failure
inside a task's batch rolls that task back to its committed offsets and retries; a record error
under the "fail" policy, or anything that retrying cannot fix, stops the app: the state turns
ERROR at that moment (health checks see it at once), then the thread rolls back and closes.
A remote store that lost its data (`StoreLostError`) fails only its task: the task is rolled
back, its stores are rebuilt from their changelogs and it carries on from its committed offsets.
How the tasks commit and roll back is the processing guarantee's `CommitProtocol` (commit.py).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from kstream.config import Config
from kstream.errors import (
    KafkaClientError,
    ProducerFencedError,
    RecordError,
    StoreError,
    StoreLostError,
    TopologyError,
)
from kstream.kafka.consumer import Consumer
from kstream.kafka.errors import FatalTransactionError
from kstream.kafka.producer import Producer
from kstream.kafka.supplier import ClientConfig
from kstream.metrics import LATENCY_SAMPLE_EVERY, Metrics
from kstream.runtime.commit import CommitProtocol, commit_protocol
from kstream.runtime.future_timestamps import FutureTimestamps
from kstream.runtime.globals import GlobalStores
from kstream.runtime.purge import RepartitionPurge
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask, restore_tasks

log = logging.getLogger("kstream.runtime")

_FATAL = (RecordError, TopologyError, StoreError, TypeError, AttributeError, NameError)
_MAX_RETRIES = 50
_REPORT_S = 10.0
_GAUGES_S = 0.5


def consumer_settings(cfg: Config) -> dict[str, Any]:
    """The stream thread's consumer settings: the user's `kafka`, with a fetch wait to match.

    A fetch may wait up to `fetch.wait.max.ms` for data. librdkafka's 500 ms default is far
    above the engine's `batch_max_wait`, and a broker that answers fetches late (the test
    broker, under a steady flow) then adds that wait to every record's latency; capping it at
    `batch_max_wait` keeps the batch wait the one latency knob. An explicit
    `fetch.wait.max.ms` in `kafka` wins.
    """
    kafka = dict(cfg.kafka)
    kafka.setdefault("fetch.wait.max.ms", max(1, min(500, cfg.batch_max_wait)))
    return kafka


class StreamThread:
    """Runs the tasks of this instance until `stop` is set."""

    def __init__(
        self,
        ctx: RuntimeContext,
        stop: threading.Event,
        on_state: Callable[[str], None],
        metrics: Metrics | None = None,
        transactional_id: str = "",
    ) -> None:
        self.ctx = ctx
        # exactly_once_v2: the id of the thread's producer, the same across restarts so that a
        # restarted instance fences its predecessor at once
        self.transactional_id = transactional_id or f"{ctx.app_id}-thread"
        self.metrics = metrics if metrics is not None else Metrics(ctx.app_id)
        self._next_gauges = 0.0
        self._next_offset: dict[TP, int] = {}
        self._seen_dups = 0
        self._seen_skipped: dict[str, int] = {}
        self._seen_dead: dict[str, int] = {}
        self.stop = stop
        self.on_state = on_state
        self.tasks: dict[tuple[int, int], RuntimeTask] = {}
        self.task_of: dict[TP, RuntimeTask] = {}
        self.consumer: Consumer | None = None
        self.globals: GlobalStores | None = None
        self.commits: CommitProtocol = commit_protocol(
            ctx, self, self.metrics, self.transactional_id
        )
        # deletes consumed repartition records after commits, as Kafka Streams does
        self.purge = RepartitionPurge(ctx)
        self._last_commit = time.monotonic()
        self._next_report = time.monotonic() + _REPORT_S
        self._failures = 0
        self._resubscribe = False
        self.processed = 0
        self.error: BaseException | None = None
        cfg = ctx.config
        self._wait_s = cfg.batch_max_wait / 1000
        self._max = cfg.batch_max_records
        self._interval_s = cfg.commit_interval / 1000
        self._gc_pause = cfg.gc_pause
        # counts and reports records that move stream time far past the wall clock
        self.future = FutureTimestamps(cfg.future_timestamp_warning, self.metrics)
        # how the thread waits before retrying (broker-free tests retry without waiting)
        self.backoff: Callable[[float], None] = time.sleep

    # --- set-up ----------------------------------------------------------------------------

    def shared_producer(self) -> Producer:
        """The producer the thread's tasks share: every task's under at_least_once, and the
        one transactional producer of all tasks under exactly_once_v2."""
        return self.commits.shared_producer()

    def renew_shared_producer(self) -> None:
        """Replace a fatal shared transactional producer (its tasks were rolled back)."""
        self.commits.renew_shared_producer(list(self.tasks.values()))

    def run(self) -> None:
        try:
            self.open()
            while not self.stop.is_set():
                self.run_once()
            self._commit_all_or_rollback()
        except BaseException as e:
            self.error = e
            log.error("stream thread stopped on an error: %s", e)
            # Before the rollback and close, which can take long (a store retrying a server
            # that is gone): health must say ERROR from the moment the thread gave up.
            self.on_state("ERROR")
        finally:
            self._shutdown()

    def open(self) -> None:
        """Bootstrap the global stores, create the consumer and join the group (`run` does
        this first; a test drives `open`, `run_once` and `close` step by step)."""
        cfg = self.ctx.config
        if self.ctx.compiled.global_stores:
            self.globals = GlobalStores(
                self.ctx.compiled,
                cfg,
                self.ctx.app_id,
                self.ctx.bootstrap_servers,
                self.ctx.client_supplier,
                kafka=consumer_settings(cfg),
            )
            self.ctx.global_views = self.globals.views
            self.globals.bootstrap(self.stop)
        if self.ctx.exactly_once and self.ctx.shared_transactions:
            # Before joining: the thread's transactional producer, starting up, fences this
            # instance's predecessor (same transactional id) and aborts its open transaction,
            # whose pending offsets would hold up reading the committed ones (_read_committed).
            self.shared_producer()
        self.consumer = self.ctx.client_supplier.consumer(
            ClientConfig(
                self.ctx.bootstrap_servers,
                consumer_settings(cfg),
                cfg.connect_timeout,
                group_id=self.ctx.app_id,
            )
        )
        self._subscribe()

    def close(self) -> None:
        """Commit what is open (roll it back after an error) and release tasks and clients."""
        try:
            if self.error is None:
                self._commit_all_or_rollback()
        finally:
            self._shutdown()

    def _subscribe(self) -> None:
        assert self.consumer is not None
        self.consumer.subscribe(
            self.ctx.compiled.source_topics,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    # --- rebalancing -----------------------------------------------------------------------

    def _on_revoke(self, parts: list[TopicPartition]) -> None:
        self.on_state("REBALANCING")
        if self.error is None:
            self._commit_all_or_rollback()
        self._close_tasks()
        self.metrics.set_assigned([])

    def _on_lost(self, parts: list[TopicPartition]) -> None:
        self.on_state("REBALANCING")
        for rt in self.tasks.values():
            self._rollback(rt)
        self._close_tasks()
        self.metrics.set_assigned([])

    def _on_assign(self, parts: list[TopicPartition]) -> None:
        self.on_state("REBALANCING")
        assert self.consumer is not None
        compiled = self.ctx.compiled
        wanted: dict[tuple[int, int], None] = {}
        for p in parts:
            sub = compiled.subtopology_for_topic(p.topic)
            wanted[(sub.id, p.partition)] = None
        tps = [(t, n) for sid, n in wanted for t in compiled.subtopologies[sid].source_topics]
        keys = list(wanted)
        committed = self._read_committed(keys, tps)
        try:
            # every store of every new task, restored by one consumer
            restored = restore_tasks(self.ctx, keys, committed)
        except BaseException as e:
            self.error = e
            self.stop.set()
            raise
        # The tasks' producers start side by side (each initialises its transactions with a
        # round trip to the broker): the pause is the slowest one's, not the sum.
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(keys)))) as pool:
            futures = {
                key: pool.submit(RuntimeTask, self.ctx, key[0], key[1], committed, stores)
                for key, stores in zip(keys, restored, strict=True)
            }
        try:
            for key, fut in futures.items():
                rt = fut.result()
                self.tasks[key] = rt
                for tp in rt.tps:
                    self.task_of[tp] = rt
        except BaseException as e:
            for fut in futures.values():
                if fut.exception() is None:
                    fut.result().close()
            self.tasks.clear()
            self.task_of.clear()
            self.error = e
            self.stop.set()
            raise
        log.info("assigned tasks %s", sorted(rt.id for rt in self.tasks.values()))
        m = self.metrics
        m.rebalance()
        m.set_assigned(list(self.task_of))
        if self.ctx.exactly_once:
            self._restore_again_if_committed_moved(tps)
        self.on_state("RUNNING")

    def _read_committed(self, keys: list[tuple[int, int]], tps: list[TP]) -> dict[TP, int]:
        """The group's committed offsets of `tps` (the partitions of tasks `keys`), read again
        until the read succeeds.

        A read_committed consumer's read waits while an open transaction holds offsets pending
        for these partitions (KIP-447): that of a previous owner killed between sending its
        offsets and committing, until a producer with its transactional id starts up (fencing
        it) or the broker aborts it after `transaction.timeout.ms`. Under exactly_once the
        tasks' transactional ids are known, so a failed read fences their previous owners and
        reads again; under exactly_once_v2 `open` fenced this instance's predecessor, and
        another instance's transaction ends with its restart or its timeout. The read is
        retried rather than raised: out of the rebalance callback, an error would leave the
        partitions assigned (confluent-kafka assigns them anyway) with no task to run them.
        """
        assert self.consumer is not None
        per_task = self.ctx.exactly_once and not self.ctx.shared_transactions
        full = self.ctx.config.connect_timeout / 1000
        # a read takes milliseconds; under exactly_once a short first try leaves time to fence
        timeout = min(2.0, full) if per_task else full
        while True:
            try:
                found = self.consumer.committed(tps, timeout=timeout)
                break
            except KafkaClientError as e:
                if self.stop.is_set():
                    raise
                log.warning(
                    "tasks %s: %s (an open transaction of a previous owner?); %s",
                    sorted(f"{sid}_{p}" for sid, p in keys),
                    e,
                    "fencing their previous owners, reading again" if per_task else "retrying",
                )
                if per_task:
                    self._fence_previous_owners(keys)
                try:
                    self._failed_once(e)
                except BaseException:
                    self.error = e
                    self.stop.set()
                    raise
                timeout = full
        committed: dict[TP, int] = {}
        for c in found:
            if c.offset is not None and c.offset >= 0:
                committed[(c.topic, c.partition)] = c.offset
        return committed

    def _fence_previous_owners(self, keys: list[tuple[int, int]]) -> None:
        """exactly_once: start a producer with each task's transactional id (RuntimeTask's,
        `<app_id>-<sub-topology>_<partition>`) and close it, aborting the previous owner's open
        transaction; side by side, one round trip for all."""

        def fence(key: tuple[int, int]) -> None:
            producer = self.ctx.new_producer(f"{self.ctx.app_id}-{key[0]}_{key[1]}")
            producer.close(1.0, drop_undelivered=True)

        with ThreadPoolExecutor(max_workers=min(16, max(1, len(keys)))) as pool:
            futures = [pool.submit(fence, key) for key in keys]
        for fut in futures:
            if fut.exception() is not None:
                log.warning("fencing a previous owner: %s", fut.exception())

    def _restore_again_if_committed_moved(self, tps: list[TP]) -> None:
        """Restore again the tasks whose committed offsets moved while they were created.

        The offsets were read before the tasks' producers fenced the previous owner, which may
        still have been committing: a broker that completes a rebalance before every member
        rejoined, and accepts offsets from a departed member (the test broker), lets it go on
        until it is fenced. A task restored with the older offsets would then skip that
        owner's last committed changelog records while the consumer resumes after them,
        losing their updates. Now that every task's producer is initialised the offsets are
        final, so a task whose offsets moved is rebuilt from them.
        """
        assert self.consumer is not None
        final: dict[TP, int] = {}
        for c in self.consumer.committed(tps):
            if c.offset is not None and c.offset >= 0:
                final[(c.topic, c.partition)] = c.offset
        for rt in list(self.tasks.values()):
            now = {tp: final[tp] for tp in rt.tps if tp in final}
            if now != rt.committed:
                log.info("task %s: offsets committed meanwhile %s; restoring again", rt.id, now)
                rt.committed = now
                self._rebuild(rt)

    def _close_tasks(self) -> None:
        for rt in self.tasks.values():
            try:
                rt.close()
            except Exception as e:
                log.warning("closing task %s: %s", rt.id, e)
        self.tasks.clear()
        self.task_of.clear()

    # --- the loop --------------------------------------------------------------------------

    def run_once(self) -> None:
        """One turn of the loop: poll a batch, process it, punctuate, commit when due."""
        assert self.consumer is not None
        if self._resubscribe:
            self._resubscribe = False
            for rt in self.tasks.values():
                self._rollback(rt, fenced=True)
            self._close_tasks()
            log.info("leaving and rejoining the group")
            self.consumer.unsubscribe()
            self._subscribe()
        try:
            msgs = self.consumer.consume_batch(self._max, self._wait_s)
        except KafkaClientError as e:
            if self.error is not None:  # a rebalance callback gave up (_on_assign)
                raise self.error from None
            # The broker is away or the group is moving: librdkafka reconnects by itself.
            log.warning("consumer: %s (retrying)", e)
            self.backoff(0.2)
            return
        if self.error is not None:
            raise self.error
        if self.globals is not None:
            self.globals.poll(0)
        if msgs:
            self._process(msgs)
        if time.monotonic() >= self._next_gauges:
            self._update_gauges()
        now_ms = int(time.time() * 1000)
        for rt in list(self.tasks.values()):
            self.guard(rt, rt.punctuate, now_ms)
        if time.monotonic() >= self._next_report:
            self._report()
        if time.monotonic() - self._last_commit >= self._interval_s or any(
            rt.task.commit_requested for rt in self.tasks.values()
        ):
            self._commit()

    def _report(self) -> None:
        self._next_report = time.monotonic() + _REPORT_S
        positions = {
            rt.id: sum(rt.committed.values()) for rt in sorted(self.tasks.values(), key=repr)
        }
        log.info(
            "processed %d record(s); duplicates dropped %d; committed positions %s",
            self.processed,
            self.ctx.duplicates_dropped,
            positions,
        )

    def _update_gauges(self) -> None:
        """Lag, restoring tasks and the error tallies, twice a second, on this thread.

        Lag is the fetch high watermark minus the next offset to read (never ListOffsets,
        which the test broker gets wrong); a partition-EOF moves "next" past transaction
        markers, which take offsets but are never delivered. The client is only called from
        this thread: calling it from another while it polls blocks.
        """
        self._next_gauges = time.monotonic() + _GAUGES_S
        m, ctx, consumer = self.metrics, self.ctx, self.consumer
        m.set_restoring(ctx.restoring)
        for rt in list(self.tasks.values()):
            dropped = rt.task.dropped
            if dropped:
                rt.task.dropped = {}
                for reason, n in dropped.items():
                    m.dropped(reason, n)
            produced = rt.collector.produced
            if produced:
                rt.collector.produced = {}
                for topic, n in produced.items():
                    m.produced(topic, n)
        if consumer is not None:
            for t, p in list(self.task_of):
                hw = consumer.high_watermark(t, p)
                if hw is not None:
                    pos = max(self._next_offset.get((t, p), 0), consumer.eof_offset(t, p) or 0)
                    m.set_lag(t, p, hw - pos)
        m.observe_stores(self._user_stores)
        if ctx.duplicates_dropped > self._seen_dups:
            m.dedup_dropped(ctx.duplicates_dropped - self._seen_dups)
            self._seen_dups = ctx.duplicates_dropped
        for kind, n in ctx.counts.skipped.items():
            if n > self._seen_skipped.get(kind, 0):
                m.dropped(f"{kind}_error", n - self._seen_skipped.get(kind, 0))
                self._seen_skipped[kind] = n
        for kind, n in ctx.counts.dead_lettered.items():
            if n > self._seen_dead.get(kind, 0):
                m.dead_lettered(kind, n - self._seen_dead.get(kind, 0))
                self._seen_dead[kind] = n

    def _user_stores(self) -> list[Any]:
        """The stores of this thread's tasks that the topology named (for their sizes)."""
        return [
            store
            for rt in list(self.tasks.values())
            for name, store in rt.task.stores.items()
            if not name.startswith("kstream-")
        ]

    def _process(self, msgs: list[Any]) -> None:
        """Run a batch through its tasks with the cyclic garbage collector paused.

        A batch allocates a few objects per record (records, decoded values, keys) that
        reference counting frees; but every 700 allocations CPython's collector scans the young
        objects, and every few scans the older ones. With GC paused for the batch (bounded by
        `batch_max_records`) and collections resuming after it, the stateful benchmark
        pipelines spend 20-50% less CPU (bench/engine_cpu.py). A collector the user turned off
        stays off; `gc_pause=False` opts out.
        """
        if self._gc_pause and gc.isenabled():
            gc.disable()
            try:
                self._process_batch(msgs)
            finally:
                gc.enable()
        else:
            self._process_batch(msgs)

    def _process_batch(self, msgs: list[Any]) -> None:
        t0 = time.perf_counter()
        groups: dict[TP, list[Any]] = {}
        # a consumer returns a partition's messages in runs: look its list up once per run
        last_topic: str | None = None
        last_part = -1
        lst: list[Any] = []
        for m in msgs:
            part = m.partition()
            topic = m.topic()
            if part != last_part or topic != last_topic:
                last_topic, last_part = topic, part
                found = groups.get((topic, part))
                if found is None:
                    groups[(topic, part)] = found = []
                lst = found
            lst.append(m)
        per_task: dict[RuntimeTask, dict[TP, list[Any]]] = {}
        task_of = self.task_of
        for tp, lst in groups.items():
            rt = task_of.get(tp)
            if rt is None:
                continue
            per_task.setdefault(rt, {})[tp] = lst
        processed = 0
        future, limit = self.future, self.future.limit(int(time.time() * 1000))
        for rt, parts in per_task.items():
            task = rt.task
            task.future_limit, task.on_future = limit, future
            if self.guard(rt, rt.process, parts):
                processed += sum(len(v) for v in parts.values())
        self.processed += processed
        m = self.metrics
        m.batch({tp: len(lst) for tp, lst in groups.items()}, time.perf_counter() - t0)
        m.processed(processed)
        # one record in 16 is enough for the latency histogram and keeps it off the hot path
        m.end_to_end_latency(
            int(time.time() * 1000), [x.timestamp()[1] for x in msgs[::LATENCY_SAMPLE_EVERY]]
        )
        nxt = self._next_offset
        for tp, lst in groups.items():
            nxt[tp] = lst[-1].offset() + 1
        m.consumed_up_to({tp: lst[-1].timestamp()[1] for tp, lst in groups.items()})

    def guard(self, rt: RuntimeTask, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn`; on a retriable failure roll the task back and let the loop retry."""
        try:
            fn(*args)
            return True
        except StoreLostError as e:
            log.warning("task %s: %s; rebuilding its stores from the changelog", rt.id, e)
            self._seek_back(self._rollback_quietly(rt))
            self._rebuild(rt)
            self._failed_once(e)
            return False
        except _FATAL:
            raise
        except ProducerFencedError as e:
            log.warning("task %s: producer fenced (%s); rejoining the group", rt.id, e)
            self._rollback(rt, fenced=True)
            self._resubscribe = True
            return False
        except FatalTransactionError as e:
            log.warning("task %s: fatal producer error (%s); recreating its producer", rt.id, e)
            self._seek_back(self._rollback(rt))
            rt.recreate_producer()
            self._failed_once(e)
            return False
        except KafkaClientError as e:
            if rt.ctx.exactly_once and rt.producer.is_fatal():
                fenced = rt.producer.fenced()
                log.warning("task %s: %s (producer %s)", rt.id, e, "fenced" if fenced else "fatal")
                if fenced:
                    self._rollback(rt, fenced=True)
                    self._resubscribe = True
                    return False
                self._seek_back(self._rollback(rt))
                rt.recreate_producer()
                self._failed_once(e)
                return False
            log.warning("task %s: %s; retrying from the committed offsets", rt.id, e)
            self._seek_back(self._rollback(rt))
            self._failed_once(e)
            return False

    def _scope(self, rt: RuntimeTask) -> list[RuntimeTask]:
        """The tasks a failure of `rt` rolls back (those sharing its transaction)."""
        return self.commits.scope(rt, list(self.tasks.values()))

    def _rollback(self, rt: RuntimeTask, fenced: bool = False) -> list[RuntimeTask]:
        """Roll back `rt` (and the tasks sharing its transaction); the tasks rolled back."""
        return self.commits.rollback(rt, list(self.tasks.values()), fenced=fenced)

    def _rollback_quietly(self, rt: RuntimeTask) -> list[RuntimeTask]:
        """Roll back `rt` whose store lost its data (re-reading its marks may fail: the task
        is rebuilt next anyway)."""
        try:
            return self._rollback(rt)
        except StoreError as e:
            log.warning("task %s: rollback: %s", rt.id, e)
            return self._scope(rt)

    def _rebuild(self, rt: RuntimeTask) -> None:
        """Replace `rt` by a new task whose stores are restored from their changelogs.

        The new task starts from `rt.committed`, the input offsets of its last commit, which
        are also what the restore admits changelog records by.
        """
        key = (rt.subtopology, rt.partition)
        self.tasks.pop(key, None)
        try:
            rt.close()
        except Exception as e:
            log.warning("closing task %s: %s", rt.id, e)
        fresh = RuntimeTask(self.ctx, rt.subtopology, rt.partition, dict(rt.committed))
        self.tasks[key] = fresh
        for tp in fresh.tps:
            self.task_of[tp] = fresh
        log.info("task %s: stores rebuilt from their changelogs", rt.id)

    def apply(self, rt: RuntimeTask, delivered: dict[TP, int]) -> None:
        """Apply `rt`'s write caches after its commit. A store that lost its data meanwhile
        is rebuilt from its changelog, which already holds this commit."""
        try:
            rt.apply(delivered)
        except StoreLostError as e:
            log.warning("task %s: %s after its commit; rebuilding its stores", rt.id, e)
            rt.committed.update(rt.next_offsets)
            self._rebuild(rt)

    def retry_from_committed(self, tasks: Sequence[RuntimeTask], error: BaseException) -> None:
        """After a failed commit: roll `tasks` back, seek to their committed offsets, back off."""
        for rt in tasks:
            self._seek_back(self._rollback(rt))
        self._failed_once(error)

    def progressed(self) -> None:
        self._failures = 0

    def _failed_once(self, e: BaseException) -> None:
        self._failures += 1
        if self._failures > _MAX_RETRIES:
            raise e
        self.backoff(min(0.1 * self._failures, 2.0))

    def _seek_back(self, tasks: list[RuntimeTask]) -> None:
        """Seek the tasks' partitions back to their committed offsets. Only tasks that were
        rolled back: the others still have this batch's records to process."""
        assert self.consumer is not None
        for rt in tasks:
            for t, p in rt.tps:
                off = rt.committed.get((t, p), OFFSET_BEGINNING)
                try:
                    self.consumer.seek(t, p, off)
                except KafkaClientError as e:
                    # Not fetching yet (just assigned): it starts from the committed offset.
                    log.debug("seek %s[%d] to %d: %s", t, p, off, e)

    # --- commit ----------------------------------------------------------------------------

    def _commit(self) -> None:
        assert self.consumer is not None
        self._last_commit = time.monotonic()
        t0 = time.perf_counter()
        transactions = self.commits.commit(list(self.tasks.values()), self.consumer)
        if transactions is not None:
            self.metrics.commit(time.perf_counter() - t0, transactions)
            self.purge.after_commit(self.tasks.values())

    def _commit_all_or_rollback(self) -> None:
        try:
            self._commit()
        except Exception as e:
            log.warning("final commit failed: %s", e)
            for rt in self.tasks.values():
                self._rollback(rt)

    def _shutdown(self) -> None:
        if self.error is not None:
            for rt in self.tasks.values():
                try:
                    self._rollback(rt)
                except Exception:
                    pass
        self._close_tasks()
        if self.consumer is not None:
            try:
                self.consumer.close()
            except Exception as e:
                log.warning("closing the consumer: %s", e)
        self.commits.close()
        self.purge.close()
        if self.globals is not None:
            self.globals.close()
