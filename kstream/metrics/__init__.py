"""The Prometheus metric catalogue of one App (docs/architecture.md, "Service and metrics").

Every name starts with `kstream_`, uses base units (`_seconds`), and counters end in `_total`.
Label values come from small fixed sets (reason, state, operation) or from the topology itself
(topic, partition, store), so a scrape never grows with the data.

The stream thread updates a `Metrics` once per batch, not once per record: the calls below take
counts and lists, and the end-to-end latency histogram takes a whole batch of timestamps in one
call. Values live in plain dicts and lists that the scrape reads; there is no lock on the hot
path (single writer, and a scrape that sees a batch half-applied is harmless).

Each App gets its own `CollectorRegistry`, so two apps in one process do not clash. Every
series of that registry, the standard `process_*` and `python_*` ones included, carries the
constant labels `app_id` and `instance_id`, so that one Prometheus (and one dashboard) can hold
many apps and tell them apart without joining on `kstream_app_info`. The families and the
registry live in `kstream.metrics.exposition`, loaded on the first scrape: a process that never
serves its metrics does not import prometheus_client (about 20 ms of CPU at every start).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from kstream.state.metrics import TIMED_OPERATIONS

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

__all__ = [
    "APP_STATES",
    "CONTENT_TYPE",
    "DROP_REASONS",
    "ERROR_KINDS",
    "LATENCY_SAMPLE_EVERY",
    "STORE_TIMING_SAMPLE_EVERY",
    "Metrics",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

APP_STATES = ("CREATED", "REBALANCING", "RUNNING", "PENDING_SHUTDOWN", "NOT_RUNNING", "ERROR")
DROP_REASONS = (
    "deserialization_error",
    "processing_error",
    "duplicate",
    "late_record",
    "expired_window",
    "null_key",
    "null_value",
    "negative_timestamp",
    "stale_response",
)
ERROR_KINDS = ("deserialization", "processing")

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STORE_BUCKETS = (0.00001, 0.0001, 0.001, 0.01, 0.1, 1.0)
BATCH_BUCKETS = (1, 10, 100, 500, 1000, 2500, 5000, 10000, 50000)

# The stream thread observes the end-to-end latency of one input record in this many (the 1st,
# 17th, ... of each batch), and times one store call in this many per store and operation.
LATENCY_SAMPLE_EVERY = 16
STORE_TIMING_SAMPLE_EVERY = 16
# State store sizes are read at most this often (seconds): a Redis store costs a round trip.
STORE_SIZE_INTERVAL_S = 5.0
# Families that prometheus_client's standard collectors export (no kstream_ prefix).
STANDARD_PREFIXES = ("process_", "python_")

_OTHER = "other"


class _Histogram:
    """Cumulative-free bucket counts; `observe_many` costs one bisect per value."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def observe_many(self, values: Iterable[float]) -> None:
        counts, bounds, find = self.counts, self.bounds, bisect.bisect_left
        total = 0.0
        for v in values:
            counts[find(bounds, v)] += 1
            total += v
        self.sum += total

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            acc += n
            out.append((_fmt(bound), float(acc)))
        acc += self.counts[-1]
        out.append(("+Inf", float(acc)))
        return out


def _zero() -> float:
    return 0.0


def _fmt(bound: float) -> str:
    return repr(float(bound))


class Metrics:
    """The metrics of one App; the runtime calls the methods, `/metrics` calls `render`.

    `stores` and `topics` known up front get their series at zero from the start, so that
    dashboards and alerts see every series before the first event.
    """

    def __init__(
        self,
        app_id: str,
        *,
        instance_id: str = "",
        guarantee: str = "",
        stores: Iterable[str] = (),
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.app_id = app_id
        self.instance_id = instance_id
        self.guarantee = guarantee
        self._registry: CollectorRegistry | None = None
        self._lock = threading.Lock()
        self.state = "CREATED"
        self.consumed: dict[tuple[str, int], int] = {}
        self.produced_by_topic: dict[str, int] = {}
        self.processed_total = 0
        self.dropped_by_reason: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self.dlq_by_reason: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
        self.commits_total = 0
        self.txn_committed = 0
        self.txn_aborted = 0
        self.rebalances_total = 0
        # rebalances that outlasted slow_rebalance_warning, and since when (time.monotonic())
        # the current one lasts: None when the app is not rebalancing
        self.slow_rebalances_total = 0
        self.rebalancing_since: float | None = None
        # read at scrape time: seconds since the stream thread's loop last turned, and how long
        # Kafka has not answered it (the thread installs both; kstream.runtime.watchdog, outage)
        self.loop_stalled_seconds: Callable[[], float] = _zero
        self.kafka_unreachable_seconds: Callable[[], float] = _zero
        # records that moved stream time more than future_timestamp_warning past the wall
        # clock, per input (topic, partition)
        self.future_timestamps: dict[tuple[str, int], int] = {}
        self.lag: dict[tuple[str, int], int] = {}
        self.assigned: set[tuple[str, int]] = set()
        self.restoring_tasks = 0
        # standby replicas (kstream.runtime.standby): records behind the changelog's end per
        # (store, partition), the standby tasks kept, the changelog records they applied
        self.standby_lag: dict[tuple[str, int], int] = {}
        self.standby_tasks = 0
        self.standby_records = 0
        self.restored_by_store: dict[str, int] = {}
        self._restore_seen: dict[tuple[str, int], int] = {}
        self.store_ops: dict[tuple[str, str], int] = {}
        self.store_latency: dict[tuple[str, str], _Histogram] = {}
        self.batch_size = _Histogram(BATCH_BUCKETS)
        self.batch_duration = _Histogram(DURATION_BUCKETS)
        self.commit_duration = _Histogram(DURATION_BUCKETS)
        self.latency = _Histogram(LATENCY_BUCKETS)
        self.last_timestamp_ms: dict[tuple[str, int], int] = {}
        self.store_entries: dict[str, int] = {}
        self.store_bytes: dict[str, int] = {}
        self._next_store_sizes = 0.0
        self.started = time.time()
        for s in stores:
            self.restored_by_store.setdefault(s, 0)
            self.store_entries.setdefault(s, 0)
        if registry is not None:  # the caller's registry: the series go there from now on
            from kstream.metrics.exposition import register

            self._registry = register(self, registry)

    @property
    def registry(self) -> CollectorRegistry:
        """This app's Prometheus registry (made on first use)."""
        with self._lock:
            if self._registry is None:
                from kstream.metrics.exposition import new_registry

                self._registry = new_registry(self)
            return self._registry

    def constant_labels(self) -> dict[str, str]:
        """The labels every series of this registry carries (read at scrape time, because
        kstreamd names the instance after the App is built)."""
        return {"app_id": self.app_id, "instance_id": self.instance_id}

    # --- the stream thread's calls (once per batch) ----------------------------------------------

    def batch(self, consumed: Mapping[tuple[str, int], int], seconds: float) -> None:
        """A batch was consumed and processed: records per (topic, partition), its duration."""
        total = 0
        mine = self.consumed
        for tp, n in consumed.items():
            mine[tp] = mine.get(tp, 0) + n
            total += n
        self.batch_size.observe(total)
        self.batch_duration.observe(seconds)

    def processed(self, n: int) -> None:
        """`n` input records went through the topology."""
        self.processed_total += n

    def produced(self, topic: str, n: int = 1) -> None:
        """`n` output records were sent to `topic` (sinks and dead letters; not changelogs)."""
        self.produced_by_topic[topic] = self.produced_by_topic.get(topic, 0) + n

    def dropped(self, reason: str, n: int = 1) -> None:
        """`n` records were dropped; `reason` is one of DROP_REASONS."""
        key = reason if reason in DROP_REASONS else _OTHER
        self.dropped_by_reason[key] = self.dropped_by_reason.get(key, 0) + n

    def dead_lettered(self, kind: str, n: int = 1) -> None:
        """`n` records went to the dead-letter topic; `kind` is one of ERROR_KINDS."""
        key = kind if kind in ERROR_KINDS else _OTHER
        self.dlq_by_reason[key] = self.dlq_by_reason.get(key, 0) + n

    def end_to_end_latency(self, now_ms: int, timestamps: Iterable[int]) -> None:
        """Observe `now - timestamp` for each input record timestamp (ms) given.

        The stream thread passes one record in LATENCY_SAMPLE_EVERY of each batch.
        """
        self.latency.observe_many(max(0, now_ms - ts) / 1000.0 for ts in timestamps)

    def consumed_up_to(self, last_timestamps: Mapping[tuple[str, int], int]) -> None:
        """The timestamp (ms) of the last record consumed, per (topic, partition) of a batch;
        `kstream_consumer_lag_seconds` is measured from it."""
        self.last_timestamp_ms.update(last_timestamps)

    def observe_stores(self, stores: Callable[[], Iterable[Any]]) -> None:
        """Read the size of this instance's state stores, at most every STORE_SIZE_INTERVAL_S.

        `stores` returns the store objects (one per store and partition); entries come from
        their backend's `approximate_num_entries()` (one call: an LMDB stat, a Redis ZCARD),
        not the store's, which would also look up every pending write of the batch in flight;
        bytes from the backend's `approximate_size_bytes()` where it has one (LMDB; omitted for
        the others). Called from the stream thread, which owns the stores; a store that cannot
        tell is skipped, never fatal.
        """
        now = time.monotonic()
        if now < self._next_store_sizes:
            return
        self._next_store_sizes = now + STORE_SIZE_INTERVAL_S
        entries = dict.fromkeys(self.store_entries, 0)
        sizes: dict[str, int] = {}
        for store in stores():
            name = str(getattr(store, "name", "")) or _OTHER
            backend = getattr(store, "backend", None)
            count = getattr(backend, "approximate_num_entries", None)
            if count is None:
                count = getattr(store, "approximate_num_entries", None)
            if count is None:
                continue
            try:
                entries[name] = entries.get(name, 0) + int(count())
                size = getattr(backend, "approximate_size_bytes", None)
                if size is not None:
                    sizes[name] = sizes.get(name, 0) + int(size())
            except Exception:  # a closed or unreachable store: its size is unknown this time
                continue
        self.store_entries = entries
        self.store_bytes = sizes

    def commit(self, seconds: float, transactions: int = 0) -> None:
        """A commit finished in `seconds`; `transactions` Kafka transactions were committed."""
        self.commits_total += 1
        self.txn_committed += transactions
        self.commit_duration.observe(seconds)

    def transaction_aborted(self, n: int = 1) -> None:
        self.txn_aborted += n

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Records behind the fetch high watermark (not ListOffsets: wrong on the test broker)."""
        self.lag[(topic, partition)] = max(0, lag)

    def lag_seconds(self, now: float | None = None) -> dict[tuple[str, int], float]:
        """Per partition with a known position: 0 when caught up, else the age of the last
        record consumed (how long ago it was written), so a stalled app's figure grows."""
        now = time.time() if now is None else now
        last = self.last_timestamp_ms
        out: dict[tuple[str, int], float] = {}
        for tp, n in list(self.lag.items()):
            ts = last.get(tp)
            if n <= 0:
                out[tp] = 0.0
            elif ts is not None:
                out[tp] = max(0.0, now - ts / 1000.0)
        return out

    def rebalance(self) -> None:
        self.rebalances_total += 1

    def set_assigned(self, partitions: Iterable[tuple[str, int]]) -> None:
        """The input partitions this instance now holds; lag series of others are removed.
        Their future-timestamp counters start at zero, so an alert on their increase sees the
        first one."""
        new = set(partitions)
        with self._lock:
            self.assigned = new
            future = self.future_timestamps
            for tp in new:
                if tp not in future:
                    future[tp] = 0
            for tp in [tp for tp in self.lag if tp not in new]:
                del self.lag[tp]
            for tp in [tp for tp in self.last_timestamp_ms if tp not in new]:
                del self.last_timestamp_ms[tp]

    def set_state(self, state: str) -> None:
        """The app's state; entering REBALANCING starts the clock of
        `kstream_rebalance_duration_seconds` (calling it again with the same state does not)."""
        if state != "REBALANCING":
            self.rebalancing_since = None
        elif self.rebalancing_since is None:
            self.rebalancing_since = time.monotonic()
        self.state = state if state in APP_STATES else _OTHER

    def rebalance_seconds(self, now: float | None = None) -> float:
        """How long the current rebalance has lasted (0 when the app is not rebalancing);
        read at scrape time, so it grows while the stream thread is stuck in one."""
        since = self.rebalancing_since
        if since is None:
            return 0.0
        return max(0.0, (time.monotonic() if now is None else now) - since)

    def slow_rebalance(self) -> None:
        """A rebalance outlasted `slow_rebalance_warning` (counted once per rebalance)."""
        self.slow_rebalances_total += 1

    def future_timestamp(self, topic: str, partition: int, n: int = 1) -> None:
        """`n` records of (`topic`, `partition`) moved stream time more than
        `future_timestamp_warning` past the wall clock."""
        key = (topic, partition)
        self.future_timestamps[key] = self.future_timestamps.get(key, 0) + n

    def set_restoring(self, tasks: int) -> None:
        self.restoring_tasks = tasks

    def set_standby_lag(self, store: str, partition: int, lag: int | None) -> None:
        """Records a standby copy of (`store`, `partition`) is behind its changelog's end;
        None: no standby of it here any more (its series goes)."""
        with self._lock:
            if lag is None:
                self.standby_lag.pop((store, partition), None)
            else:
                self.standby_lag[(store, partition)] = max(0, lag)

    def set_standby_tasks(self, n: int) -> None:
        self.standby_tasks = n

    def standby_applied(self, n: int) -> None:
        """Standby tasks applied `n` changelog records."""
        self.standby_records += n

    # --- kstream.state.metrics.StoreMetrics ------------------------------------------------------

    def record_operation(
        self, store: str, partition: int, op: str, seconds: float, count: int = 1
    ) -> None:
        key = (store, op if op in TIMED_OPERATIONS else _OTHER)
        ops = self.store_ops
        ops[key] = ops.get(key, 0) + count
        h = self.store_latency.get(key)
        if h is None:
            h = self.store_latency[key] = _Histogram(STORE_BUCKETS)
        h.observe(seconds)

    def record_restore(
        self, store: str, partition: int, restored: int, end_offset: int | None
    ) -> None:
        """Restore progress callback: `restored` is cumulative for (store, partition)."""
        prev = self._restore_seen.get((store, partition), 0)
        if restored < prev:  # a new restore of the same partition starts over
            prev = 0
        self._restore_seen[(store, partition)] = restored
        self.restored_by_store[store] = self.restored_by_store.get(store, 0) + restored - prev

    # --- exposition ------------------------------------------------------------------------------

    def render(self) -> bytes:
        """The Prometheus text exposition of this app's registry."""
        from kstream.metrics.exposition import render

        return render(self.registry)

    def collect(self) -> Iterator[Metric]:
        """This app's kstream families, with the constant labels (not the process ones)."""
        from kstream.metrics.exposition import labelled_families

        yield from labelled_families(self)
