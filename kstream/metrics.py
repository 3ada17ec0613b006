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
many apps and tell them apart without joining on `kstream_app_info`.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from kstream.state.metrics import TIMED_OPERATIONS

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
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self.state = "CREATED"
        self.consumed: dict[tuple[str, int], int] = {}
        self.produced_by_topic: dict[str, int] = {}
        self.processed_total = 0
        self.dropped_by_reason: dict[str, int] = dict.fromkeys(DROP_REASONS, 0)
        self.dlq_by_reason: dict[str, int] = dict.fromkeys(ERROR_KINDS, 0)
        self.dedup_dropped_total = 0
        self.commits_total = 0
        self.txn_committed = 0
        self.txn_aborted = 0
        self.rebalances_total = 0
        self.lag: dict[tuple[str, int], int] = {}
        self.assigned: set[tuple[str, int]] = set()
        self.restoring_tasks = 0
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
        self.registry.register(_Collector(self))
        self.registry.register(_Labelled(_runtime_registry(), self.constant_labels))

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

    def dedup_dropped(self, n: int) -> None:
        """`n` inputs carried a provenance id already seen (dropped as duplicates).

        Counted once, in `kstream_records_dropped_total{reason="duplicate"}`; the deprecated
        `kstream_dedup_dropped_total` repeats it for one more release.
        """
        self.dedup_dropped_total += n
        self.dropped("duplicate", n)

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
        """The input partitions this instance now holds; lag series of others are removed."""
        new = set(partitions)
        with self._lock:
            self.assigned = new
            for tp in [tp for tp in self.lag if tp not in new]:
                del self.lag[tp]
            for tp in [tp for tp in self.last_timestamp_ms if tp not in new]:
                del self.last_timestamp_ms[tp]

    def set_state(self, state: str) -> None:
        self.state = state if state in APP_STATES else _OTHER

    def set_restoring(self, tasks: int) -> None:
        self.restoring_tasks = tasks

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
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """This app's kstream families, with the constant labels (not the process ones)."""
        yield from _Collector(self).collect()


class _Collector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        labels = self._m.constant_labels()
        for fam in _families(self._m):
            yield _with_labels(fam, labels)


class _Labelled(Collector):
    """Another registry's series with this app's constant labels added."""

    def __init__(self, inner: CollectorRegistry, labels: Callable[[], dict[str, str]]) -> None:
        self._inner = inner
        self._labels = labels

    def collect(self) -> Iterator[Metric]:
        labels = self._labels()
        for fam in self._inner.collect():
            yield _with_labels(fam, labels)


def _runtime_registry() -> CollectorRegistry:
    """prometheus_client's process (CPU, memory, file descriptors), garbage collector and
    platform collectors, which an App's own registry would otherwise lack."""
    reg = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=reg)
    GCCollector(registry=reg)
    PlatformCollector(registry=reg)
    return reg


def _with_labels(fam: Metric, labels: dict[str, str]) -> Metric:
    """`fam` with `labels` on every sample (a family's own label of the same name wins)."""
    fam.samples = [s._replace(labels={**labels, **s.labels}) for s in fam.samples]
    return fam


def _counter(name: str, doc: str, labels: list[str], items: Iterable[Any]) -> Metric:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for key, value in items:
        fam.add_metric([str(k) for k in key], float(value))
    return fam


def _histogram(name: str, doc: str, h: _Histogram, labels: list[str] | None = None) -> Metric:
    fam = HistogramMetricFamily(name, doc, labels=labels)
    fam.add_metric([], h.buckets(), h.sum)
    return fam


def _families(m: Metrics) -> Iterator[Metric]:
    info = GaugeMetricFamily(
        "kstream_app_info",
        "Always 1; the labels name the app, this instance and its processing guarantee.",
        labels=["app_id", "instance_id", "guarantee"],
    )
    info.add_metric([m.app_id, m.instance_id, m.guarantee], 1.0)
    yield info
    state = GaugeMetricFamily(
        "kstream_app_state", "1 for the app's current state, 0 for the others.", labels=["state"]
    )
    for s in APP_STATES:
        state.add_metric([s], 1.0 if m.state == s else 0.0)
    yield state
    up = GaugeMetricFamily("kstream_app_start_time_seconds", "When the app started (Unix time).")
    up.add_metric([], m.started)
    yield up

    yield _counter(
        "kstream_records_consumed",
        "Input records consumed, per input partition.",
        ["topic", "partition"],
        sorted(m.consumed.items()),
    )
    yield _counter(
        "kstream_records_produced",
        "Output records produced (sinks and dead letters, not changelogs), per topic.",
        ["topic"],
        [((t,), n) for t, n in sorted(m.produced_by_topic.items())],
    )
    yield _counter(
        "kstream_records_processed",
        "Input records that went through the topology (retried batches count again).",
        [],
        [((), m.processed_total)],
    )
    yield _counter(
        "kstream_records_dropped",
        "Records dropped, by reason (skipped errors, duplicates, late records, expired windows, "
        "null keys or values that the operator cannot use).",
        ["reason"],
        [((r,), n) for r, n in sorted(m.dropped_by_reason.items())],
    )
    yield _counter(
        "kstream_dedup_dropped",
        "DEPRECATED, removed in the next release: the same count as "
        'kstream_records_dropped_total{reason="duplicate"}, which should be used instead '
        "(inputs whose provenance id was seen before).",
        [],
        [((), m.dedup_dropped_total)],
    )
    yield _counter(
        "kstream_dlq_records",
        "Records sent to the dead-letter topic, by kind of error.",
        ["reason"],
        [((r,), n) for r, n in sorted(m.dlq_by_reason.items())],
    )
    yield _histogram("kstream_batch_records", "Records per batch.", m.batch_size)
    yield _histogram(
        "kstream_batch_duration_seconds", "Time to process one batch.", m.batch_duration
    )
    yield _counter(
        "kstream_commits", "Commits (offsets, or transactions).", [], [((), m.commits_total)]
    )
    yield _histogram(
        "kstream_commit_duration_seconds", "Time to commit (all tasks).", m.commit_duration
    )
    yield _counter(
        "kstream_transactions_committed",
        "Kafka transactions committed (exactly-once).",
        [],
        [((), m.txn_committed)],
    )
    yield _counter(
        "kstream_transactions_aborted",
        "Kafka transactions aborted (the batch is retried).",
        [],
        [((), m.txn_aborted)],
    )
    yield _histogram(
        "kstream_end_to_end_latency_seconds",
        "Time from an input record's timestamp to the end of the batch that processed it; "
        f"sampled: one input record in {LATENCY_SAMPLE_EVERY} is observed, so _count is about "
        f"1/{LATENCY_SAMPLE_EVERY} of the records consumed.",
        m.latency,
    )
    lag = GaugeMetricFamily(
        "kstream_consumer_lag",
        "Records between the committed position and the fetch high watermark, per partition.",
        labels=["topic", "partition"],
    )
    for (t, p), n in sorted(list(m.lag.items())):
        lag.add_metric([t, str(p)], float(n))
    yield lag
    lag_s = GaugeMetricFamily(
        "kstream_consumer_lag_seconds",
        "Per partition: 0 when kstream_consumer_lag is 0, else now minus the timestamp of the "
        "last record consumed (how old the position is); absent until a record was consumed.",
        labels=["topic", "partition"],
    )
    for (t, p), secs in sorted(m.lag_seconds().items()):
        lag_s.add_metric([t, str(p)], secs)
    yield lag_s
    yield _counter(
        "kstream_rebalances", "Rebalances seen by this instance.", [], [((), m.rebalances_total)]
    )
    assigned = GaugeMetricFamily(
        "kstream_assigned_partitions", "Input partitions assigned to this instance."
    )
    assigned.add_metric([], float(len(m.assigned)))
    yield assigned
    restoring = GaugeMetricFamily(
        "kstream_restoring_tasks", "Tasks whose stores are being restored from changelogs."
    )
    restoring.add_metric([], float(m.restoring_tasks))
    yield restoring
    yield _counter(
        "kstream_restore_records",
        "Changelog records applied while restoring, per store.",
        ["store"],
        [((s,), n) for s, n in sorted(m.restored_by_store.items())],
    )
    yield _counter(
        "kstream_store_operations",
        "State store operations (calls), per store and operation; exact in steps of "
        f"{STORE_TIMING_SAMPLE_EVERY}.",
        ["store", "operation"],
        sorted(list(m.store_ops.items())),
    )
    fam = HistogramMetricFamily(
        "kstream_store_operation_duration_seconds",
        f"Latency of state store calls; sampled: one call in {STORE_TIMING_SAMPLE_EVERY} per "
        "store and operation is timed, so _count counts timed calls, not operations "
        "(kstream_store_operations_total counts those). Scans are timed until the cursor "
        "exists.",
        labels=["store", "operation"],
    )
    for (store, op), h in sorted(list(m.store_latency.items())):
        fam.add_metric([store, op], h.buckets(), h.sum)
    yield fam
    entries = GaugeMetricFamily(
        "kstream_store_entries",
        "Approximate entries per state store, summed over this instance's partitions "
        f"(committed state, without the batch in flight; read every {STORE_SIZE_INTERVAL_S:g} s).",
        labels=["store"],
    )
    for store, n in sorted(m.store_entries.items()):
        entries.add_metric([store], float(n))
    yield entries
    size = GaugeMetricFamily(
        "kstream_store_size_bytes",
        "Bytes the state store's data occupies (pages in use), summed over this instance's "
        "partitions; only for backends that can tell cheaply (LMDB).",
        labels=["store"],
    )
    for store, n in sorted(m.store_bytes.items()):
        size.add_metric([store], float(n))
    yield size
