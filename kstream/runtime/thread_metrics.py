"""The stream thread's bookkeeping for its metrics: gauges, lag, error deltas, progress log.

The loop only says what happened (a batch, a turn); this object turns it into metrics. Gauges
are refreshed twice a second rather than per batch, the counters the tasks and the runtime
context tally (dropped, produced, skipped and dead-lettered records, duplicates) are handed to
`Metrics` as deltas since the last refresh, and a progress line is logged every ten seconds.
It runs on the stream thread, the only thread that may call the consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

from kstream.kafka.consumer import Consumer
from kstream.metrics import LATENCY_SAMPLE_EVERY, Metrics
from kstream.runtime.tasks import TP, RuntimeContext, RuntimeTask

log = logging.getLogger("kstream.runtime")

__all__ = ["ThreadMetrics"]

_REPORT_S = 10.0
_GAUGES_S = 0.5


class ThreadMetrics:
    """Feeds one stream thread's `Metrics` and logs its progress."""

    def __init__(self, ctx: RuntimeContext, metrics: Metrics) -> None:
        self.ctx = ctx
        self.metrics = metrics
        #: input records processed (including records of batches that were retried)
        self.processed = 0
        self._next_gauges = 0.0
        self._next_report = time.monotonic() + _REPORT_S
        # the next offset to read per partition, for the lag
        self._next_offset: dict[TP, int] = {}
        self._seen_dups = 0
        self._seen_skipped: dict[str, int] = {}
        self._seen_dead: dict[str, int] = {}

    def batch(
        self, msgs: list[Any], groups: Mapping[TP, list[Any]], processed: int, seconds: float
    ) -> None:
        """A batch of `msgs` (`groups`: per partition) went through its tasks in `seconds`;
        `processed` of its records were not rolled back."""
        self.processed += processed
        m = self.metrics
        m.batch({tp: len(lst) for tp, lst in groups.items()}, seconds)
        m.processed(processed)
        # one record in 16 is enough for the latency histogram and keeps it off the hot path
        m.end_to_end_latency(
            int(time.time() * 1000), [x.timestamp()[1] for x in msgs[::LATENCY_SAMPLE_EVERY]]
        )
        nxt = self._next_offset
        for tp, lst in groups.items():
            nxt[tp] = lst[-1].offset() + 1
        m.consumed_up_to({tp: lst[-1].timestamp()[1] for tp, lst in groups.items()})

    def gauges(
        self,
        tasks: Collection[RuntimeTask],
        partitions: Collection[TP],
        consumer: Consumer | None,
    ) -> None:
        """Refresh the gauges of `tasks` (owning `partitions`) if due (twice a second)."""
        if time.monotonic() >= self._next_gauges:
            self._update_gauges(tasks, partitions, consumer)

    def progress(self, tasks: Collection[RuntimeTask]) -> None:
        """Log the thread's progress if due (every ten seconds)."""
        if time.monotonic() >= self._next_report:
            self._report(tasks)

    def _report(self, tasks: Collection[RuntimeTask]) -> None:
        self._next_report = time.monotonic() + _REPORT_S
        positions = {rt.id: sum(rt.committed.values()) for rt in sorted(tasks, key=repr)}
        log.info(
            "processed %d record(s); duplicates dropped %d; committed positions %s",
            self.processed,
            self.ctx.duplicates_dropped,
            positions,
        )

    def _update_gauges(
        self,
        tasks: Collection[RuntimeTask],
        partitions: Collection[TP],
        consumer: Consumer | None,
    ) -> None:
        """Lag, restoring tasks and the error tallies, twice a second, on this thread.

        Lag is the fetch high watermark minus the next offset to read (never ListOffsets,
        which the test broker gets wrong); a partition-EOF moves "next" past transaction
        markers, which take offsets but are never delivered. The client is only called from
        this thread: calling it from another while it polls blocks.
        """
        self._next_gauges = time.monotonic() + _GAUGES_S
        m, ctx = self.metrics, self.ctx
        m.set_restoring(ctx.restoring)
        tasks = list(tasks)
        for rt in tasks:
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
            for t, p in list(partitions):
                hw = consumer.high_watermark(t, p)
                if hw is not None:
                    pos = max(self._next_offset.get((t, p), 0), consumer.eof_offset(t, p) or 0)
                    m.set_lag(t, p, hw - pos)
        m.observe_stores(lambda: _user_stores(tasks))
        self._error_deltas()

    def _error_deltas(self) -> None:
        """Hand the runtime context's running tallies to the metrics as increments."""
        m, ctx = self.metrics, self.ctx
        if ctx.duplicates_dropped > self._seen_dups:
            m.dropped("duplicate", ctx.duplicates_dropped - self._seen_dups)
            self._seen_dups = ctx.duplicates_dropped
        for kind, n in ctx.counts.skipped.items():
            if n > self._seen_skipped.get(kind, 0):
                m.dropped(f"{kind}_error", n - self._seen_skipped.get(kind, 0))
                self._seen_skipped[kind] = n
        for kind, n in ctx.counts.dead_lettered.items():
            if n > self._seen_dead.get(kind, 0):
                m.dead_lettered(kind, n - self._seen_dead.get(kind, 0))
                self._seen_dead[kind] = n


def _user_stores(tasks: Collection[RuntimeTask]) -> list[Any]:
    """The stores of `tasks` that the topology named (for their sizes)."""
    return [
        store
        for rt in tasks
        for name, store in rt.task.stores.items()
        if not name.startswith("kstream-")
    ]
