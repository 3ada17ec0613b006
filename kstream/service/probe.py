"""Feeds an App's `Metrics` when its runtime does not feed them itself.

An App whose runtime calls the `kstream.metrics.Metrics` hooks exposes them as `app.metrics`;
then this module only refreshes the gauges read at scrape time. Otherwise `attach` observes
the app from outside: it wraps the stream thread's batch and commit steps on the instance (not
the class, so other apps in the process are untouched) and derives counters from the runtime's
own tallies. Every look into the runtime is defensive: if its shape changes, metrics degrade
to what can still be seen, the app itself never fails because of them.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from kstream.metrics import Metrics
from kstream.state.metrics import instrument

log = logging.getLogger("kstream.service")

__all__ = ["Probe", "assigned_partitions", "attach"]

_LAG_EVERY_S = 0.5


def assigned_partitions(app: Any) -> list[tuple[str, int]]:
    """The input (topic, partition) pairs this instance holds right now."""
    fn = getattr(app, "assigned_partitions", None)
    if callable(fn):
        return sorted((str(t), int(p)) for t, p in fn())
    stream = getattr(app, "_stream", None)
    tasks = getattr(stream, "tasks", None) or {}
    out: list[tuple[str, int]] = []
    for rt in list(tasks.values()):
        out.extend((str(t), int(p)) for t, p in getattr(rt, "tps", ()))
    return sorted(out)


class Probe:
    """Keeps `metrics` in step with `app`; `sample()` runs before each scrape."""

    def __init__(self, app: Any, metrics: Metrics, *, native: bool) -> None:
        self.app = app
        self.metrics = metrics
        self.native = native
        self._stream: Any = None
        self._tasks: set[int] = set()
        self._producers: set[int] = set()
        self._processed = 0
        self._dups = 0
        self._skipped: dict[str, int] = {}
        self._dead: dict[str, int] = {}
        self._next: dict[tuple[str, int], int] = {}

    # --- scrape time ----------------------------------------------------------------------------

    def sample(self) -> None:
        """Refresh gauges (state, assignment, restoring) and counters kept by the runtime."""
        m, app = self.metrics, self.app
        state = getattr(app, "state", None)
        if state is not None:
            m.set_state(str(getattr(state, "value", state)))
        m.set_assigned(assigned_partitions(app))
        ctx = getattr(app, "_ctx", None)
        if ctx is not None:
            m.set_restoring(int(getattr(ctx, "restoring", 0) or 0))
        if self.native:
            return
        self._hook()
        processed = int(getattr(app, "processed", 0) or 0)
        if processed > self._processed:
            m.processed(processed - self._processed)
        self._processed = max(self._processed, processed)
        if ctx is None:
            return
        dups = int(getattr(ctx, "duplicates_dropped", 0) or 0)
        if dups > self._dups:
            m.dedup_dropped(dups - self._dups)
            self._dups = dups
        counts = getattr(ctx, "counts", None)
        for kind, n in dict(getattr(counts, "skipped", {}) or {}).items():
            prev = self._skipped.get(kind, 0)
            if n > prev:
                m.dropped(f"{kind}_error", n - prev)
                self._skipped[kind] = n
        for kind, n in dict(getattr(counts, "dead_lettered", {}) or {}).items():
            prev = self._dead.get(kind, 0)
            if n > prev:
                m.dead_lettered(kind, n - prev)
                self._dead[kind] = n

    # --- wrapping the stream thread -------------------------------------------------------------

    def start(self) -> None:
        """Call right after `app.start()`, before the first batch, to observe every batch."""
        if not self.native:
            self._hook()

    def _hook(self) -> None:
        stream = getattr(self.app, "_stream", None)
        if stream is None or stream is self._stream:
            return
        self._stream = stream
        try:
            process = stream._process
            commit = stream._commit
        except AttributeError:
            log.info("metrics: this runtime has no batch/commit steps to observe")
            return
        stream._process = self._wrap_process(stream, process)
        stream._commit = self._wrap_commit(stream, commit)
        once = getattr(stream, "_once", None)
        if callable(once):
            stream._once = self._wrap_once(once)

    def _wrap_once(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Lag is read on the stream thread: the client blocks other threads while polling."""
        last = 0.0

        @functools.wraps(fn)
        def once() -> Any:
            nonlocal last
            try:
                return fn()
            finally:
                now = time.monotonic()
                if now - last >= _LAG_EVERY_S:
                    last = now
                    try:
                        self._update_lag()
                    except Exception as e:  # metrics must never stop the app
                        log.debug("metrics: lag: %s", e)

        return once

    def _wrap_process(self, stream: Any, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        @functools.wraps(fn)
        def process(msgs: Any) -> Any:
            self._check_tasks(stream)
            t0 = time.perf_counter()
            try:
                return fn(msgs)
            finally:
                elapsed = time.perf_counter() - t0
                try:
                    self._after_batch(stream, msgs, elapsed)
                except Exception as e:  # metrics must never stop the app
                    log.debug("metrics: batch bookkeeping failed: %s", e)

        return process

    def _after_batch(self, stream: Any, msgs: Any, elapsed: float) -> None:
        m = self.metrics
        consumed: dict[tuple[str, int], int] = {}
        last: dict[tuple[str, int], int] = {}
        stamps: list[int] = []
        for msg in msgs:
            tp = (msg.topic(), msg.partition())
            consumed[tp] = consumed.get(tp, 0) + 1
            last[tp] = msg.offset()
            stamps.append(msg.timestamp()[1])
        m.batch(consumed, elapsed)
        m.end_to_end_latency(int(time.time() * 1000), stamps)
        for tp, off in last.items():
            self._next[tp] = off + 1

    def _update_lag(self) -> None:
        """Lag = fetch high watermark - next offset to read, per assigned input partition.

        A partition-EOF event moves "next" past transaction markers, which take offsets but
        are never delivered, so an idle exactly-once input shows 0, not the marker count.
        """
        consumer = getattr(self._stream, "consumer", None)
        if consumer is None:
            return
        for t, p in assigned_partitions(self.app):
            hw = consumer.high_watermark(t, p)
            if hw is None:
                continue
            pos = max(self._next.get((t, p), 0), consumer.eof_offset(t, p) or 0)
            self.metrics.set_lag(t, p, hw - pos)

    def _wrap_commit(self, stream: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
        m = self.metrics

        @functools.wraps(fn)
        def commit() -> Any:
            tasks = list(getattr(stream, "tasks", {}).values())
            open_before = [rt for rt in tasks if getattr(rt, "open", False)]
            t0 = time.perf_counter()
            try:
                return fn()
            finally:
                if open_before:
                    eos = bool(getattr(stream.ctx, "exactly_once", False))
                    done = sum(1 for rt in open_before if not getattr(rt, "open", False))
                    m.commit(time.perf_counter() - t0, done if eos else 0)

        return commit

    def _check_tasks(self, stream: Any) -> None:
        tasks = list(getattr(stream, "tasks", {}).values())
        ids = {id(rt) for rt in tasks}
        if ids != self._tasks:
            if ids - self._tasks:
                self.metrics.rebalance()
            for rt in tasks:
                if id(rt) not in self._tasks:
                    self._instrument_task(rt)
            self._tasks = ids
        for rt in tasks:
            producer = getattr(rt, "producer", None)
            if producer is not None and id(producer) not in self._producers:
                self._wrap_producer(stream, producer)

    def _instrument_task(self, rt: Any) -> None:
        stores = getattr(getattr(rt, "task", None), "stores", {}) or {}
        for name, store in list(stores.items()):
            if not str(name).startswith("kstream-"):
                instrument(store, self.metrics)
        rollback = getattr(rt, "rollback", None)
        if callable(rollback):
            rt.rollback = self._wrap_rollback(rt, rollback)

    def _wrap_rollback(self, rt: Any, fn: Callable[[], Any]) -> Callable[[], Any]:
        @functools.wraps(fn)
        def rollback() -> Any:
            producer = getattr(rt, "producer", None)
            if getattr(producer, "in_txn", False):
                self.metrics.transaction_aborted()
            return fn()

        return rollback

    def _wrap_producer(self, stream: Any, producer: Any) -> None:
        self._producers.add(id(producer))
        produce = getattr(producer, "produce", None)
        if not callable(produce):
            return
        skip = set(getattr(stream.ctx, "changelog_topics", ()) or ())
        counts = self.metrics.produced_by_topic

        @functools.wraps(produce)
        def counted(topic: str, *args: Any, **kwargs: Any) -> Any:
            out = produce(topic, *args, **kwargs)
            if topic not in skip:
                counts[topic] = counts.get(topic, 0) + 1
            return out

        producer.produce = counted


def attach(app: Any, metrics: Metrics | None = None, instance_id: str = "") -> Probe:
    """The probe of `app`: its own `app.metrics` if it keeps them, else a new `Metrics`."""
    own = getattr(app, "metrics", None)
    if isinstance(own, Metrics):
        return Probe(app, own, native=True)
    if metrics is None:
        topo = getattr(app, "topology", None)
        stores = list(getattr(topo, "stores", {}) or {})
        metrics = Metrics(
            str(getattr(app, "app_id", "")),
            instance_id=instance_id,
            guarantee=str(getattr(app, "processing_guarantee", "")),
            stores=stores,
        )
    return Probe(app, metrics, native=False)
