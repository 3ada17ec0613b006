"""The stream thread: one consumer and the poll-process-commit loop.

Loop: consume up to `batch_max_records` (waiting at most `batch_max_wait`) -> group by task ->
one `process` per task -> wall-clock punctuation -> every `commit_interval`, commit. A task
reading several partitions buffers its records and processes them when Kafka's task-idling
rule lets it (`max_task_idle_ms`, idling.py), checked after each batch and each loop turn.
A failure inside a task's batch rolls that task back to its committed offsets and retries; a
record error under the "fail" policy, or anything that retrying cannot fix, stops the app: the
state turns ERROR at that moment (health checks see it at once), then the thread rolls back
and closes.
A remote store that lost its data (`StoreLostError`) fails only its task: the task is rolled
back, its stores are rebuilt from their changelogs and it carries on from its committed offsets.
How the tasks commit and roll back is the processing guarantee's `CommitProtocol` (commit.py);
which failure gets which recovery is the table of failures.py; the tasks themselves (rebalances,
creation, restore, rebuild) are the `TaskManager`'s (task_manager.py), the metrics bookkeeping
`ThreadMetrics`' (thread_metrics.py).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from itertools import groupby
from typing import Any

from confluent_kafka import KafkaException

from kstream.config import Config
from kstream.errors import KafkaClientError, StoreLostError
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.kafka.supplier import ClientConfig
from kstream.metrics import Metrics
from kstream.runtime.commit import CommitProtocol, commit_protocol
from kstream.runtime.failures import MAX_RETRIES, Recovery, route
from kstream.runtime.future_timestamps import FutureTimestamps
from kstream.runtime.globals import GlobalStores
from kstream.runtime.outage import BrokerOutage
from kstream.runtime.purge import RepartitionPurge
from kstream.runtime.rebalance import (
    BROKER_ASSIGNED,
    INCREMENTAL,
    STREAMS,
    JoinWatch,
    effective_protocol,
    group_settings,
)
from kstream.runtime.standby import Membership, StandbyTasks
from kstream.runtime.task_manager import TaskManager
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask
from kstream.runtime.thread_metrics import ThreadMetrics
from kstream.runtime.watchdog import Watchdog

log = logging.getLogger("kstream.runtime")


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
        membership: Membership | None = None,
    ) -> None:
        """`membership`: the instance registry the thread publishes its tasks to and places
        standby replicas by (kstream.runtime.standby); None: neither."""
        self.ctx = ctx
        # exactly_once_v2: the id of the thread's producer, the same across restarts so that a
        # restarted instance fences its predecessor at once
        self.transactional_id = transactional_id or f"{ctx.app_id}-thread"
        self.metrics = metrics if metrics is not None else Metrics(ctx.app_id)
        # gauges, lag, error deltas and the progress log
        self.stats = ThreadMetrics(ctx, self.metrics)
        self.stop = stop
        self.on_state = on_state
        self.consumer: Consumer | None = None
        self.globals: GlobalStores | None = None
        self.commits: CommitProtocol = commit_protocol(
            ctx, self, self.metrics, self.transactional_id
        )
        # "cooperative", "eager" or "consumer" (kstream.runtime.rebalance)
        self.rebalance_protocol = effective_protocol(ctx.compiled, ctx.config)
        # under the consumer protocol: fails the thread if the broker never lets it join
        self.join_watch = JoinWatch(
            self.rebalance_protocol, ctx.config.connect_timeout / 1000, ctx.bootstrap_servers
        )
        # warm copies of other instances' tasks (num_standby_replicas), and the publishing of
        # this thread's tasks to the instance registry
        self.standbys = StandbyTasks(ctx, membership, self.metrics, ctx.config.batch_max_records)
        # the tasks: rebalances, creation, restore, rebuild and rollback
        self.task_manager = TaskManager(
            ctx,
            self,
            self.commits,
            self.metrics,
            stop,
            on_state,
            cooperative=self.rebalance_protocol in INCREMENTAL,
            standbys=self.standbys,
            broker_assigned=self.rebalance_protocol in BROKER_ASSIGNED,
        )
        # deletes consumed repartition records after commits, as Kafka Streams does
        self.purge = RepartitionPurge(ctx)
        self._last_commit = time.monotonic()
        self._failures = 0
        self._resubscribe = False
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
        # the loop's heartbeat, which liveness reads (a restore is a long turn, not a stall)
        self.watchdog = Watchdog(excused=lambda: ctx.restoring > 0)
        # waits out a broker that does not answer instead of spending retries on it
        self.outage = BrokerOutage(
            ctx.bootstrap_servers, lambda t: self._kafka_answers(t), stop, self.watchdog.beat
        )
        self.metrics.loop_stalled_seconds = self.watchdog.stalled_for
        self.metrics.kafka_unreachable_seconds = self.outage.away_for

    # --- set-up ----------------------------------------------------------------------------

    @property
    def tasks(self) -> dict[tuple[int, int], RuntimeTask]:
        """This thread's tasks by (sub-topology, partition) (the task manager's)."""
        return self.task_manager.tasks

    @property
    def task_of(self) -> dict[TP, RuntimeTask]:
        """This thread's task of each assigned input partition (the task manager's)."""
        return self.task_manager.task_of

    @property
    def rejoin_pending(self) -> bool:
        """The thread leaves the group and rejoins at its next turn (its producer was
        fenced: its tasks were rolled back and commit nothing until then)."""
        return self._resubscribe

    @property
    def processed(self) -> int:
        """Input records processed (including records of batches that were retried)."""
        return self.stats.processed

    def shared_producer(self) -> Producer:
        """The producer the thread's tasks share: every task's under at_least_once, and the
        one transactional producer of all tasks under exactly_once_v2."""
        return self.commits.shared_producer()

    def run(self) -> None:
        self.watchdog.running_on(threading.current_thread())
        self.watchdog.watch(f"kstream-watchdog-{self.ctx.app_id}")
        try:
            self.open()
            while not self.stop.is_set():
                self.run_once()
            self.commit_all_or_rollback()
        except BaseException as e:
            self.error = e
            log.error("stream thread stopped on an error: %s", e)
            # Before the rollback and close, which can take long (a store retrying a server
            # that is gone): health must say ERROR from the moment the thread gave up.
            self.on_state("ERROR")
        finally:
            self.watchdog.stop_watching()
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
        # before joining: what the guarantee starts first (exactly_once_v2's producer, which
        # fences this instance's predecessor)
        self.commits.start()
        # with standbys, an instance joining a running app warms up first (KIP-441)
        self.standbys.warm_up(self.stop, cfg.acceptable_recovery_lag)
        if self.rebalance_protocol == STREAMS:
            # the protocol client (kafka-python) is imported only by apps that use it
            from kstream.runtime.streams_consumer import streams_group_consumer

            consumer = streams_group_consumer(self.ctx, consumer_settings(cfg))
            if cfg.num_standby_replicas > 0:
                consumer.on_standbys = self.standbys.follow
            self.consumer = consumer
        else:
            self.consumer = self.ctx.client_supplier.consumer(
                ClientConfig(
                    self.ctx.bootstrap_servers,
                    {**consumer_settings(cfg), **group_settings(cfg, self.rebalance_protocol)},
                    cfg.connect_timeout,
                    group_id=self.ctx.app_id,
                )
            )
        self.task_manager.subscribe(self.consumer)
        self.join_watch.subscribed(time.monotonic())

    def close(self) -> None:
        """Commit what is open (roll it back after an error) and release tasks and clients."""
        try:
            if self.error is None:
                self.commit_all_or_rollback()
        finally:
            self._shutdown()

    # --- the loop --------------------------------------------------------------------------

    def run_once(self) -> None:
        """One turn of the loop: poll a batch, process it, punctuate, commit when due."""
        assert self.consumer is not None
        self.watchdog.beat()
        if self._resubscribe:
            self._resubscribe = False
            for rt in self.tasks.values():
                self.task_manager.rollback(rt, fenced=True)
            self.task_manager.close_all()
            self.commits.after_fenced()
            log.info("leaving and rejoining the group")
            self.consumer.unsubscribe()
            self.task_manager.subscribe(self.consumer)
            self.join_watch.subscribed(time.monotonic())
        tm = self.task_manager
        if tm.awaiting_seek and not tm.rebalancing:
            tm.apply_seeks()
        try:
            msgs = self.consumer.consume_batch(self._max, self._wait_s)
        except KafkaClientError as e:
            if self.error is not None:  # a rebalance callback gave up (_on_assign)
                raise self.error from None
            # The broker is away or the group is moving: librdkafka reconnects by itself.
            log.warning("consumer: %s (retrying)", e)
            if not self.outage.wait_out(e):
                self.backoff(0.2)
            return
        if self.error is not None:
            raise self.error
        self.join_watch.check(self.consumer, time.monotonic())
        if self.globals is not None:
            self.globals.poll(0)
        if msgs:
            self._process(msgs)
        self._process_idle()
        # asked once a turn: each asks the client for its group metadata (a call that takes
        # librdkafka's group lock while holding the GIL)
        rebalancing = self.task_manager.rebalancing
        if not rebalancing:
            self._tick_standbys()
        self.stats.gauges(self.tasks.values(), self.task_of.keys(), self.consumer)
        now_ms = int(time.time() * 1000)
        for rt in list(self.tasks.values()):
            if rt.punctuates_wall_clock:
                self.guard(rt, self._punctuate, rt, now_ms)
        self.stats.progress(self.tasks.values())
        due = time.monotonic() - self._last_commit >= self._interval_s or any(
            rt.task.commit_requested for rt in self.tasks.values()
        )
        # no commit while the group moves to a new generation (TaskManager.rebalancing)
        if due and not rebalancing:
            self.commit()

    def _tick_standbys(self) -> None:
        """The standbys' turn (kstream.runtime.standby). A standby that fails (a changelog
        record its restore step refuses, a consumer error) must not stop the active tasks:
        the standbys are closed and placed again at the next check, from their checkpoints
        (the active task's own restore meets the same record, and stops there if the policy
        says so)."""
        try:
            self.standbys.tick(self.tasks)
        except Exception as e:
            log.warning("standby tasks: %s; closing them (placed again from their checkpoints)", e)
            self.standbys.close()

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
        groups = by_partition(msgs)
        per_task: dict[RuntimeTask, dict[TP, list[Any]]] = {}
        task_of = self.task_of
        # rolled back, their seek deferred: the records read meanwhile are read again later
        skip = self.task_manager.awaiting_seek
        for tp, lst in groups.items():
            rt = task_of.get(tp)
            if rt is None or tp in skip:
                continue
            per_task.setdefault(rt, {})[tp] = lst
        processed = 0
        future, limit = self.future, self.future.limit(int(time.time() * 1000))
        for rt, parts in per_task.items():
            task = rt.task
            task.future_limit, task.on_future = limit, future
            if self.guard(rt, self._process_task, rt, parts):
                processed += sum(len(v) for v in parts.values())
        self.stats.batch(msgs, groups, processed, time.perf_counter() - t0)

    def _process_task(self, rt: RuntimeTask, parts: dict[TP, list[Any]]) -> None:
        """`rt`'s share of the batch, in the commit period its protocol opens. A task with
        input buffers (task idling) buffers it and processes what it is ready to."""
        self.commits.begin(rt)
        if rt.buffers is None:
            rt.process(parts)
        else:
            rt.buffer(parts)
            rt.process_ready(int(time.time() * 1000), self.fetched_lag)

    def _process_idle(self) -> None:
        """Give the tasks that hold back buffered records (task idling) their turn even when
        the batch brought them nothing: an idle deadline may have passed, or a lag become
        known. One readiness check per such task and turn, O(its partitions)."""
        now_ms = 0
        for rt in list(self.tasks.values()):
            buffers = rt.buffers
            if buffers is None or not buffers.pending:
                continue
            now_ms = now_ms or int(time.time() * 1000)
            if buffers.ready(now_ms, self.fetched_lag):
                self.guard(rt, self._drain, rt, now_ms)

    def _drain(self, rt: RuntimeTask, now_ms: int) -> None:
        """`rt`'s buffered records it is ready for, in the commit period its protocol opens."""
        self.commits.begin(rt)
        rt.process_ready(now_ms, self.fetched_lag)

    def fetched_lag(self, tp: TP, position: int | None) -> int | None:
        """The records the broker holds for `tp` past `position` (the next offset its task
        expects; None: not known there), from the last fetch response, as Kafka's consumer
        reports it to Kafka Streams' task idling: None while no fetch response told it yet.

        The end is librdkafka's cached high watermark (the last stable offset under
        read_committed). Where the consumer stands is the furthest of `position`, the
        consumer's own position and its last end-of-partition event (cleared by a seek): a
        transaction's commit marker follows its last record but is never delivered, so only
        the end-of-partition event shows that the consumer got past it.
        """
        consumer = self.consumer
        assert consumer is not None
        high = consumer.high_watermark(*tp)
        if high is None:
            return None
        at = -1 if position is None else position
        eof = consumer.eof_offset(*tp)
        if eof is not None:
            at = max(at, eof)
        try:
            own = consumer.position([tp])[0].offset
        except KafkaException:
            own = -1
        if own is not None:
            at = max(at, own)
        if at < 0:
            return 0 if high == 0 else None  # a partition that never had a record
        return max(0, high - at)

    def _punctuate(self, rt: RuntimeTask, now_ms: int) -> None:
        """`rt`'s wall-clock punctuations, in the commit period its protocol opens."""
        self.commits.begin(rt)
        rt.punctuate(now_ms)

    def guard(self, rt: RuntimeTask, fn: Callable[..., Any], *args: Any) -> bool:
        """Run `fn`; on a failure the table of failures.py routes, recover (the loop retries)
        and return False; an error the table says stops the thread is raised."""
        try:
            fn(*args)
            return True
        except Exception as e:
            recovery = route(e, rt.producer if self.commits.transactional else None)
            if recovery is Recovery.STOP:
                raise
            log.warning("task %s: %s; %s", rt.id, e, recovery.value)
            self._recover(rt, recovery, e)
            return False

    def _recover(self, rt: RuntimeTask, recovery: Recovery, e: BaseException) -> None:
        """Carry out `recovery` of `rt` after its step failed with `e`: with a broker that
        answers (an outage is waited out first, and counts no retry), since a recovery may
        need a new producer, which could not start without one."""
        tm = self.task_manager
        waited = recovery is not Recovery.REBUILD and self.outage.wait_out(e)
        if recovery is Recovery.REJOIN:
            tm.rollback(rt, fenced=True)
            self._resubscribe = True
            return
        if recovery is Recovery.REVIVE:
            try:
                tm.revive(rt)
            except KafkaClientError as revive_error:
                # the group's assignment creates the tasks from the committed state too
                log.warning("reviving the tasks: %s; rejoining the group", revive_error)
                self._resubscribe = True
                return
        elif recovery is Recovery.REBUILD:
            tm.seek_back(tm.rollback_quietly(rt))
            tm.rebuild(rt)
        else:
            failed = rt.producer
            tm.seek_back(tm.rollback(rt))
            # a stuck producer's abort failed at once and the rollback replaced it already
            if recovery is Recovery.RECREATE_PRODUCER or (
                recovery is Recovery.ABANDON_PRODUCER and rt.producer is failed
            ):
                self.commits.recreate_producer(rt, list(self.tasks.values()))
        if not waited:
            self.failed_once(e)

    def apply(self, rt: RuntimeTask, delivered: dict[TP, int]) -> None:
        """Apply `rt`'s write caches after its commit. A store that lost its data meanwhile
        is rebuilt from its changelog, which already holds this commit."""
        try:
            rt.apply(delivered)
        except StoreLostError as e:
            log.warning("task %s: %s after its commit; rebuilding its stores", rt.id, e)
            rt.committed.update(rt.next_offsets)
            self.task_manager.rebuild(rt)

    def retry_from_committed(self, tasks: Sequence[RuntimeTask], error: BaseException) -> None:
        """After a failed commit: roll `tasks` back, seek to their committed offsets, back off
        (an outage is waited out first, and counts no retry)."""
        waited = self.outage.wait_out(error)
        for rt in tasks:
            self.task_manager.seek_back(self.task_manager.rollback(rt))
        if tasks and route(error) is Recovery.ABANDON_PRODUCER:  # a flush stuck for good
            self.commits.recreate_producer(tasks[0], list(self.tasks.values()))
        if not waited:
            self.failed_once(error)

    def progressed(self) -> None:
        self._failures = 0

    def fail(self, error: BaseException) -> None:
        """Give up from a rebalance callback: the loop raises `error` at its next turn."""
        self.error = error
        self.stop.set()

    def failed_once(self, e: BaseException) -> None:
        """Count a failed attempt and back off; raise `e` when the retries are used up. A
        failure while Kafka does not answer is no attempt: the outage is waited out."""
        if self.outage.wait_out(e):
            return
        self._failures += 1
        if self._failures > MAX_RETRIES:
            raise e
        self.backoff(min(0.1 * self._failures, 2.0))

    # --- commit ----------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit the open tasks now (the loop does when `commit_interval` has passed or a
        task asked for it)."""
        assert self.consumer is not None
        self._last_commit = time.monotonic()
        t0 = time.perf_counter()
        transactions = self.commits.commit(list(self.tasks.values()), self.consumer)
        if transactions is not None:
            self.metrics.commit(time.perf_counter() - t0, transactions)
            self.purge.after_commit(self.tasks.values())

    def commit_all_or_rollback(self) -> list[RuntimeTask]:
        """Commit the open tasks (at a revoke or the end); if that raises, roll every task
        back. The tasks rolled back (their partitions must be sought back if they go on)."""
        try:
            self.commit()
        except Exception as e:
            log.warning("final commit failed: %s", e)
            rolled: list[RuntimeTask] = []
            for rt in self.tasks.values():
                rolled += self.task_manager.rollback(rt)
            return rolled
        return []

    def _kafka_answers(self, timeout_s: float) -> bool:
        """Whether Kafka answers the thread's consumer (kstream.runtime.outage's probe); a
        consumer without the probe (a mock) counts as answered."""
        answers = getattr(self.consumer, "answers", None)
        return True if answers is None else bool(answers(timeout_s))

    def _shutdown(self) -> None:
        if self.error is not None:
            for rt in self.tasks.values():
                try:
                    self.task_manager.rollback(rt)
                except Exception:
                    pass
        # Every step runs, whatever the one before raised, and nothing escapes the thread: a
        # client that fails while closing (librdkafka's consumer group protocol may answer a
        # last revoke or commit with an error) must not leave the others open, nor end the
        # thread on an exception nobody handles.
        steps: list[tuple[str, Callable[[], None] | None]] = [
            ("the tasks", self.task_manager.close_all),
            ("the standby tasks", self.standbys.close),
            ("the consumer", None if self.consumer is None else self.consumer.close),
            ("the producers", self.commits.close),
            ("the repartition purge", self.purge.close),
            ("the global stores", None if self.globals is None else self.globals.close),
        ]
        for what, close in steps:
            if close is None:
                continue
            try:
                close()
            except Exception as e:
                log.warning("closing %s: %s", what, e)


def by_partition(msgs: list[Any]) -> dict[TP, list[Any]]:
    """`msgs` by (topic, partition), each partition's in the order consumed, the partitions in
    the order they first appear.

    A consumer returns a partition's messages in runs. With one topic in the batch (a task
    reading one topic: every stateless and most stateful apps) the runs are cut by
    `itertools.groupby` on the partition, read with the message class's own method from C
    (not `operator.methodcaller`, which builds a bound method per call and cost twice the
    loop); several topics, or a batch of mixed message classes, take a loop that looks each
    run's list up once."""
    groups: dict[TP, list[Any]] = {}
    if msgs:
        cls = type(msgs[0])
        try:
            topics = set(map(cls.topic, msgs))
            if len(topics) == 1:
                (topic,) = topics
                for part, run in groupby(msgs, cls.partition):
                    found = groups.get((topic, part))
                    if found is None:
                        groups[(topic, part)] = list(run)
                    else:
                        found.extend(run)
                return groups
        except (TypeError, AttributeError):  # a message of another class: the loop asks each
            groups = {}
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
    return groups
