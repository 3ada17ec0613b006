"""The stream thread: one consumer and the poll loop.

Loop: consume up to `batch_max_records` (waiting at most `batch_max_wait`) -> the task manager
routes the batch to its tasks and runs them (`TaskManager.process`; task idling's buffered
records, `process_idle`) -> a slice of the new tasks' restoration (`TaskManager.restore`,
restorer.py) -> wall-clock punctuation (`TaskManager.punctuate`) -> every
`commit_interval`, `TaskManager.commit`. The thread calls the task manager and never the other
way: the tasks (rebalances, creation, restore, processing, commit, recovery) are the
`TaskManager`'s (task_manager.py), how they commit the processing guarantee's
`CommitProtocol`'s (commit.py), which failure gets which recovery the table of failures.py's;
the thread reads what it must act on (`TaskManager.error`: a rebalance callback gave up;
`rejoin_pending`: a producer was fenced). A record error under the "fail" policy, or anything
retrying cannot fix, stops the app: the state turns ERROR at that moment (health checks see it
at once), then the thread rolls back and closes. The metrics bookkeeping is `ThreadMetrics`'
(thread_metrics.py).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kstream.config import Config
from kstream.errors import KafkaClientError
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.kafka.supplier import ClientConfig
from kstream.metrics import Metrics
from kstream.runtime.commit import CommitProtocol, commit_protocol
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
from kstream.runtime.retries import RetryBudget
from kstream.runtime.standby import Membership, StandbyTasks
from kstream.runtime.task_manager import TaskManager
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask
from kstream.runtime.thread_metrics import ThreadMetrics
from kstream.runtime.watchdog import Watchdog

log = logging.getLogger("kstream.runtime")

_T = TypeVar("_T")


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
        self.commits: CommitProtocol = commit_protocol(ctx, self.metrics, self.transactional_id)
        # "cooperative", "eager" or "consumer" (kstream.runtime.rebalance)
        self.rebalance_protocol = effective_protocol(ctx.compiled, ctx.config)
        # under the consumer protocol: fails the thread if the broker never lets it join
        self.join_watch = JoinWatch(
            self.rebalance_protocol, ctx.config.connect_timeout / 1000, ctx.bootstrap_servers
        )
        # warm copies of other instances' tasks (num_standby_replicas), and the publishing of
        # this thread's tasks to the instance registry
        self.standbys = StandbyTasks(ctx, membership, self.metrics, ctx.config.batch_max_records)
        cfg = ctx.config
        self._wait_s = cfg.batch_max_wait / 1000
        self._max = cfg.batch_max_records
        self._interval_s = cfg.commit_interval / 1000
        self._gc_pause = cfg.gc_pause
        # the loop's heartbeat, which liveness reads (a restore is a long turn, not a stall)
        self.watchdog = Watchdog(excused=lambda: ctx.restoring > 0)
        # waits out a broker that does not answer instead of spending retries on it
        # whether Kafka answers the thread's consumer, asked of the consumer itself (a test
        # replaces it)
        self.kafka_probe: Callable[[float], bool] = lambda t: kafka_answers(self.consumer, t)
        self.outage = BrokerOutage(
            ctx.bootstrap_servers, lambda t: self.kafka_probe(t), stop, self.watchdog.beat
        )
        # the tasks: rebalances, creation, restore, processing, commit, rollback and rebuild
        self.task_manager = TaskManager(
            ctx,
            self.commits,
            RetryBudget(self.outage),
            self.metrics,
            stop,
            on_state,
            cooperative=self.rebalance_protocol in INCREMENTAL,
            standbys=self.standbys,
            broker_assigned=self.rebalance_protocol in BROKER_ASSIGNED,
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
        return self.task_manager.rejoin_pending

    @property
    def error(self) -> BaseException | None:
        """The error the thread stopped on (or a rebalance callback gave up on), if any."""
        return self.task_manager.error

    @error.setter
    def error(self, error: BaseException | None) -> None:
        self.task_manager.error = error

    @property
    def backoff(self) -> Callable[[float], None]:
        """How the thread waits before retrying (broker-free tests retry without waiting,
        the simulator on its clock)."""
        return self.task_manager.retries.backoff

    @backoff.setter
    def backoff(self, backoff: Callable[[float], None]) -> None:
        self.task_manager.retries.backoff = backoff

    @property
    def purge(self) -> RepartitionPurge:
        """Deletes consumed repartition records after commits (the task manager's)."""
        return self.task_manager.purge

    @purge.setter
    def purge(self, purge: RepartitionPurge) -> None:
        self.task_manager.purge = purge

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
        tm = self.task_manager
        if tm.rejoin_pending:
            tm.rejoin()
            self.join_watch.subscribed(time.monotonic())
        if tm.awaiting_seek and not tm.rebalancing:
            tm.apply_seeks()
        failed = self._gc_paused(self._take_batch, tm)
        if failed is not None:
            if self.error is not None:  # a rebalance callback gave up (_on_assign)
                raise self.error from None
            # The broker is away or the group is moving: librdkafka reconnects by itself.
            log.warning("consumer: %s (retrying)", failed)
            if not self.outage.wait_out(failed):
                self.backoff(0.2)
            return
        tm.process_idle()
        # asked once a turn: each asks the client for its group metadata (a call that takes
        # librdkafka's group lock while holding the GIL)
        rebalancing = tm.rebalancing
        # a slice of the new tasks' restoration, beside the running ones (restorer.py)
        if tm.restoring:
            self._gc_paused(tm.restore)
        # standbys are placed again once no task restores: the placement must not give this
        # instance a standby of a task it is restoring
        if not rebalancing and not tm.restoring:
            self._tick_standbys()
        self.stats.gauges(self.tasks.values(), self.task_of.keys(), self.consumer)
        tm.punctuate(int(time.time() * 1000))
        self.stats.progress(self.tasks.values())
        due = time.monotonic() - tm.last_commit >= self._interval_s or any(
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

    def _take_batch(self, tm: TaskManager) -> KafkaClientError | None:
        """Poll a batch and run it through its tasks (`TaskManager.process`); the consumer's
        error if the poll failed (`run_once` waits it out, with the collector running).

        `run_once` calls this with the cyclic garbage collector paused (`_gc_paused`) from the
        consume call on, not from processing only: the client builds a message object per
        record, each tracked by the collector, so a batch arriving with collections on ran a
        young-generation scan every 700 messages and promoted the messages still alive into
        the older generations (bringing on the full collections over the whole heap sooner).
        Paused, the messages and records die by reference counting, here, before the
        collector resumes."""
        assert self.consumer is not None
        try:
            # while tasks restore, the poll does not wait: the turn's restore slice is the work
            msgs = self.consumer.consume_batch(self._max, 0 if tm.restoring else self._wait_s)
        except KafkaClientError as e:
            return e
        if self.error is not None:
            raise self.error
        self.join_watch.check(self.consumer, time.monotonic())
        if self.globals is not None:
            self.globals.poll(0)
        if msgs:
            self._process_batch(msgs)
        return None

    def _gc_paused(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run `fn(*args)` (a batch, a restore slice) with the cyclic garbage collector paused.

        A batch allocates a few objects per record (records, decoded values, keys) that
        reference counting frees; but every 700 allocations CPython's collector scans the young
        objects, and every few scans the older ones. With GC paused for the batch (bounded by
        `batch_max_records`) and collections resuming after it, the stateful benchmark
        pipelines spend 20-50% less CPU (bench/engine_cpu.py). A restore slice fills a store
        with objects that live on: paused, it also runs far fewer of the full collections,
        which grow with the store and stop every thread while they run. A collector the user
        turned off stays off; `gc_pause=False` opts out.
        """
        if self._gc_pause and gc.isenabled():
            gc.disable()
            try:
                return fn(*args)
            finally:
                gc.enable()
        return fn(*args)

    def _process_batch(self, msgs: list[Any]) -> None:
        t0 = time.perf_counter()
        groups, processed = self.task_manager.process(msgs)
        self.stats.batch(msgs, groups, processed, time.perf_counter() - t0)

    # --- commit ----------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit the open tasks now (the loop does when `commit_interval` has passed or a
        task asked for it; `TaskManager.commit`)."""
        self.task_manager.commit()

    def commit_all_or_rollback(self) -> list[RuntimeTask]:
        """Commit the open tasks (at the end); if that raises, roll every task back
        (`TaskManager.commit_all_or_rollback`)."""
        return self.task_manager.commit_all_or_rollback()

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


def kafka_answers(consumer: Consumer | None, timeout_s: float) -> bool:
    """Whether Kafka answers `consumer` (kstream.runtime.outage's probe); a consumer without
    the probe (a mock), or none yet, counts as answered."""
    answers = getattr(consumer, "answers", None)
    return True if answers is None else bool(answers(timeout_s))
