"""The queries of a topology on Spark, one per sub-topology, and the order they run in.

`TaskQueries` starts each sub-topology's query when what it reads from is done (under
`availableNow`), runs the sub-topologies that feed one another in turns (`_Loop`), and waits
for them; `settle` waits for the transactions on the topics a query is about to read to
complete before it starts, fencing the write slots of a killed run's open ones.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kstream.kafka.supplier import ClientConfig, KafkaClientSupplier
from kstream.spark.failure import raise_failure
from kstream.spark.progress import ProgressLog

if TYPE_CHECKING:
    from kstream.spark.plan import TaskPlan

log = logging.getLogger(__name__)

_POLL_S = 1.0
# while a query waits for its upstream to finish: the next starts this soon after
_HANDOVER_POLL_S = 0.2


class TaskQueries:
    """The queries of a topology, one per sub-topology.

    With `sequential` (the `availableNow` trigger) a query starts once every sub-topology it
    reads from (through repartition topics) has finished, so it reads everything its upstream
    wrote; sub-topologies that do not feed one another run side by side. Sub-topologies that
    feed one another (`plan.loops`: a foreign-key join's subscriptions and responses, a
    sub-topology reading a topic it writes) take turns, each's query run to the end of what is
    there, in id order, round and round, until a whole round writes nothing (`_Loop`): what one
    writes, the next reads, as a Kafka Streams app's tasks exchange those topics. Otherwise all
    run at once.
    """

    def __init__(
        self,
        plan: TaskPlan,
        starters: dict[int, Callable[[], tuple[Any, Any]]],
        sequential: bool,
        settled: Callable[[list[str], Callable[[], bool]], Any] | None = None,
    ) -> None:
        """`settled(topics, stopped)` waits for the transactions on `topics` to complete, or
        for `stopped()` (`settle`)."""
        self.plan = plan
        self._settled = settled or (lambda topics, stopped: settle(plan, topics, stopped=stopped))
        self.queries: list[Any] = []
        self.sinks: list[Any] = []
        self._sequential = sequential
        self._loops: list[_Loop] = []
        if sequential:
            for members in plan.loops:
                self._loops.append(_Loop(members, {m: starters.pop(m) for m in members}))
        self._pending = dict(starters)  # upstream first, as `plan.order` lists them
        self._started: dict[int, Any] = {}
        self._stopped = False
        # re-entrant: `stop` runs in a signal handler, on the thread that may be holding it
        # while it starts a query or waits for its input to settle
        self._lock = threading.RLock()
        self._start_ready()

    def _done(self, sid: int) -> bool:
        for loop in self._loops:
            if sid in loop.members:
                return loop.finished
        return sid in self._started and not self._started[sid].isActive

    def _ready(self, upstream: set[int]) -> bool:
        return not self._sequential or all(self._done(u) for u in upstream)

    def _start_ready(self) -> bool:
        """Start a loop's next turn, and every pending query whose upstream has finished;
        whether any started."""
        with self._lock:
            if self._stopped:
                return False
            turned = False
            for loop in self._loops:
                ups = {u for m in loop.members for u in self.plan.upstream.get(m, set())}
                if not loop.finished and self._ready(ups):
                    start = loop.next()
                    if start is not None:
                        self._settle(loop.current)
                        if self._stopped:
                            return False
                        loop.running = self._run(start)
                        turned = True
            ready = [
                sid for sid in self._pending if self._ready(self.plan.upstream.get(sid, set()))
            ]
            for sid in ready:
                self._settle(sid)
                if self._stopped:
                    return False
                self._started[sid] = self._run(self._pending.pop(sid))[0]
            return bool(ready) or turned

    def _settle(self, sid: int) -> None:
        """Under availableNow, before sub-topology `sid`'s query starts: wait until the
        transactions that the queries before it committed on the topics it reads are complete
        (each partition's read_committed end, its last stable offset, at its high watermark).
        A commit returns before the broker has written its markers, and a query starting at
        once would take the last stable offset of that moment as the end of what is there:
        the last transaction of its upstream would wait for the next run."""
        if not self._sequential:
            return
        written = {t for sinks in self.plan.sinks.values() for t in sinks}
        topics = sorted(t for t in self.plan.read_topics(sid) if t in written)
        if topics:
            self._settled(topics, lambda: self._stopped)

    def _run(self, start: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
        """Start a query (and stop it at once if `stop` came meanwhile); it and its sink."""
        query, sink = start()
        self.queries.append(query)
        self.sinks.append(sink)
        if self._stopped:
            query.stop()
        return query, sink

    @property
    def _waiting(self) -> bool:
        return bool(self._pending) or any(not loop.finished for loop in self._loops)

    def wait(self) -> None:
        """Block until every query has stopped, logging their batches; re-raise a failure."""
        log = ProgressLog()
        while True:
            for q in list(self.queries):
                log.poll(q)
            self._raise_failure()
            if self._waiting and self._start_ready():
                continue
            active = [q for q in self.queries if q.isActive]
            if active:
                try:
                    active[0].awaitTermination(_HANDOVER_POLL_S if self._waiting else _POLL_S)
                except Exception as e:  # the query's failure, which awaitTermination raises
                    self.stop()
                    raise_failure(e)
                continue
            # a query may have failed since the check above, and stopped: its failure is
            # final now that none runs, and ends the run rather than pass for its end
            self._raise_failure()
            if not (self._waiting and self._start_ready()):
                return

    def _raise_failure(self) -> None:
        """Stop every query and raise the first failure a query has, if any."""
        for q in list(self.queries):
            exc = q.exception()
            if exc is not None:
                self.stop()
                raise_failure(exc)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            queries = list(self.queries)
        for q in queries:
            q.stop()

    def close(self) -> None:
        for s in self.sinks:
            s.close()


SETTLE_TIMEOUT_S = 30.0
# a transaction still open this long after its writer's query ended is a dead writer's (a
# driver or an executor killed mid-write): its slots are fenced, which aborts it
FENCE_AFTER_S = 3.0


def settle(
    plan: TaskPlan,
    topics: list[str],
    fence: Callable[[list[tuple[str, int]]], Any] | None = None,
    stopped: Callable[[], bool] = lambda: False,
    timeout_s: float = SETTLE_TIMEOUT_S,
) -> bool:
    """Wait until no transaction is open or being completed on `topics` (read_committed end
    equal to the high watermark on every partition); False if that took longer than
    `timeout_s` (a transaction some other writer keeps open), after a warning, or `stopped()`.

    Under `availableNow` the queries that write `topics` have ended when this runs, so a
    transaction still open after `FENCE_AFTER_S` belongs to a writer that died (a run killed
    mid-write leaves it open until the broker's transaction timeout, a minute): `fence(pending
    partitions)` then fences their writers' transactional ids, which aborts it. Without that a
    query would take its last stable offset as the end of its input and miss what was
    committed behind the open transaction."""
    import time

    from confluent_kafka import TopicPartition

    supplier = plan.client_supplier or KafkaClientSupplier()
    committed = supplier.consumer(ClientConfig(plan.bootstrap_servers, plan.kafka))
    uncommitted = supplier.consumer(
        ClientConfig(plan.bootstrap_servers, {**plan.kafka, "isolation.level": "read_uncommitted"})
    )
    try:
        tps = [TopicPartition(t, p) for t in topics for p in committed.partitions_for(t)]
        started = time.monotonic()
        deadline = started + timeout_s
        fenced = fence is None
        while True:
            pending = []
            for tp in tps:
                stable = committed.get_watermark_offsets(tp, cached=False)
                high = uncommitted.get_watermark_offsets(tp, cached=False)
                if stable is None or high is None or stable[1] < high[1]:
                    pending.append((tp.topic, tp.partition))
            if not pending:
                return True
            if stopped():
                return False
            if not fenced and time.monotonic() > started + FENCE_AFTER_S:
                assert fence is not None
                log.warning(
                    "partitions %s have a transaction open though their writers have ended; "
                    "fencing the writers' transactional ids",
                    [f"{t}[{p}]" for t, p in pending],
                )
                fence(pending)
                fenced = True
                continue
            if time.monotonic() > deadline:
                log.warning(
                    "partitions %s still have a transaction open after %.0f s; starting anyway",
                    [f"{t}[{p}]" for t, p in pending],
                    timeout_s,
                )
                return False
            time.sleep(0.02)
    finally:
        committed.close()
        uncommitted.close()


class _Loop:
    """Sub-topologies that feed one another, run in turns under the `availableNow` trigger.

    Each turn runs one member's query to the end of what its topics hold, the members in id
    order, round and round; the loop is finished once as many turns in a row as it has members
    wrote nothing (a batch the sink found already written counts as writing: what it wrote
    before a restart may not have been read yet). Then nothing any member wrote is left unread.
    """

    def __init__(self, members: list[int], starters: dict[int, Callable[[], tuple[Any, Any]]]):
        self.members = members
        self.starters = starters
        self.finished = False
        self.running: tuple[Any, Any] | None = None  # the current turn's query and sink
        self.current = members[0]  # the member whose turn comes (or runs)
        self._turn = 0
        self._idle = 0

    def next(self) -> Callable[[], tuple[Any, Any]] | None:
        """The next turn's starter, once the current turn's query has stopped (None while it
        runs, or when the loop is finished)."""
        if self.running is not None:
            query, sink = self.running
            if query.isActive:
                return None
            self.running = None
            wrote = sink.records_written > 0 or sink.batches_skipped > 0
            self._idle = 0 if wrote else self._idle + 1
            if self._idle >= len(self.members):
                self.finished = True
                return None
        sid = self.current = self.members[self._turn % len(self.members)]
        self._turn += 1
        return self.starters[sid]
