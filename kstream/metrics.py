"""The Prometheus metric catalogue of one App (DESIGN.md section 6).

Every name starts with `kstream_`, uses base units (`_seconds`), and counters end in `_total`.
Label values come from small fixed sets (reason, state, operation) or from the topology itself
(topic, partition, store), so a scrape never grows with the data.

The stream thread updates a `Metrics` once per batch, not once per record: the calls below take
counts and lists, and the end-to-end latency histogram takes a whole batch of timestamps in one
call. Values live in plain dicts and lists that the scrape reads; there is no lock on the hot
path (single writer, and a scrape that sees a batch half-applied is harmless).

Each App gets its own `CollectorRegistry`, so two apps in one process do not clash.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from kstream.state.metrics import TIMED_OPERATIONS

__all__ = [
    "APP_STATES",
    "CONTENT_TYPE",
    "DROP_REASONS",
    "ERROR_KINDS",
    "Metrics",
    "lint_exposition",
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
        self.started = time.time()
        for s in stores:
            self.restored_by_store.setdefault(s, 0)
        self.registry.register(_Collector(self))

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
        """`n` inputs carried a provenance id already seen (dropped as duplicates)."""
        self.dedup_dropped_total += n
        self.dropped("duplicate", n)

    def dead_lettered(self, kind: str, n: int = 1) -> None:
        """`n` records went to the dead-letter topic; `kind` is one of ERROR_KINDS."""
        key = kind if kind in ERROR_KINDS else _OTHER
        self.dlq_by_reason[key] = self.dlq_by_reason.get(key, 0) + n

    def end_to_end_latency(self, now_ms: int, timestamps: Iterable[int]) -> None:
        """Observe `now - timestamp` for each input record timestamp (ms) of a batch."""
        self.latency.observe_many(max(0, now_ms - ts) / 1000.0 for ts in timestamps)

    def commit(self, seconds: float, transactions: int = 0) -> None:
        """A commit finished in `seconds`; `transactions` Kafka transactions were committed."""
        self.commits_total += 1
        self.txn_committed += transactions
        self.commit_duration.observe(seconds)

    def transaction_aborted(self, n: int = 1) -> None:
        self.txn_aborted += n

    def set_lag(self, topic: str, partition: int, lag: int) -> None:
        """Records behind the fetch high watermark (never from ListOffsets; DESIGN.md 8)."""
        self.lag[(topic, partition)] = max(0, lag)

    def rebalance(self) -> None:
        self.rebalances_total += 1

    def set_assigned(self, partitions: Iterable[tuple[str, int]]) -> None:
        """The input partitions this instance now holds; lag series of others are removed."""
        new = set(partitions)
        with self._lock:
            self.assigned = new
            for tp in [tp for tp in self.lag if tp not in new]:
                del self.lag[tp]

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
        yield from _families(self)


class _Collector(Collector):
    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def collect(self) -> Iterator[Metric]:
        return _families(self._m)


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
        "Inputs dropped because their provenance id was seen before (exactly-once dedup).",
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
        "Time from an input record's timestamp to the end of the batch that processed it.",
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
        "State store operations, per store and operation.",
        ["store", "operation"],
        sorted(list(m.store_ops.items())),
    )
    fam = HistogramMetricFamily(
        "kstream_store_operation_duration_seconds",
        "Latency of state store operations.",
        labels=["store", "operation"],
    )
    for (store, op), h in sorted(list(m.store_latency.items())):
        fam.add_metric([store, op], h.buckets(), h.sum)
    yield fam


_BOUNDED_LABELS: dict[str, set[str]] = {
    "reason": {*DROP_REASONS, *ERROR_KINDS, _OTHER},
    "state": set(APP_STATES) | {"other"},
}


def lint_exposition(text: str, max_series_per_family: int = 200) -> list[str]:
    """Problems in a /metrics page: names, units, counter suffixes, label cardinality."""
    problems: list[str] = []
    families = list(text_string_to_metric_families(text))
    if not families:
        return ["no metrics at all"]
    for fam in families:
        name = fam.name
        if not name.startswith("kstream_"):
            problems.append(f"{name}: missing the kstream_ prefix")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
            problems.append(f"{name}: not snake_case")
        for bad in ("_ms", "_millis", "_milliseconds", "_kb", "_mb", "_percent"):
            if name.endswith(bad) or f"{bad}_" in name:
                problems.append(f"{name}: use base units (seconds, bytes, ratios)")
        if fam.type == "counter":
            for s in fam.samples:
                if not s.name.endswith("_total"):
                    problems.append(f"{s.name}: a counter sample must end in _total")
        elif name.endswith("_total"):
            problems.append(f"{name}: only counters end in _total")
        if fam.type == "summary":
            problems.append(f"{name}: use histograms, not summaries")
        if fam.type == "histogram" and "duration" in name and not name.endswith("_seconds"):
            problems.append(f"{name}: durations are in seconds")
        if len(fam.samples) > max_series_per_family:
            problems.append(f"{name}: {len(fam.samples)} series (unbounded labels?)")
        for s in fam.samples:
            for label, value in s.labels.items():
                allowed = _BOUNDED_LABELS.get(label)
                if allowed is not None and value not in allowed:
                    problems.append(f"{s.name}: label {label}={value!r} is not in the fixed set")
                if label == "partition" and not value.isdigit():
                    problems.append(f"{s.name}: partition label {value!r} is not a number")
    return problems
