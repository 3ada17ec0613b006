"""The Prometheus side of `kstream.metrics.Metrics`: its families, with the app's constant
labels, and its registry (the standard process, GC and platform collectors included).

`Metrics` imports this module on the first scrape, so prometheus_client is loaded only by a
process that serves or reads its metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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

from kstream.metrics import (
    APP_STATES,
    LATENCY_SAMPLE_EVERY,
    STORE_SIZE_INTERVAL_S,
    STORE_TIMING_SAMPLE_EVERY,
    Metrics,
    _Histogram,
)


def new_registry(metrics: Metrics) -> CollectorRegistry:
    """A registry of its own for `metrics`' app."""
    return register(metrics, CollectorRegistry(auto_describe=True))


def register(metrics: Metrics, registry: CollectorRegistry) -> CollectorRegistry:
    """Add the app's kstream families and the process ones, both labelled, to `registry`."""
    registry.register(_Collector(metrics))
    registry.register(_Labelled(_runtime_registry(), metrics.constant_labels))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def labelled_families(metrics: Metrics) -> Iterator[Metric]:
    """The app's kstream families with its constant labels (not the process ones)."""
    yield from _Collector(metrics).collect()


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


def _gauge(name: str, doc: str, labels: list[str], items: Iterable[Any]) -> Metric:
    fam = GaugeMetricFamily(name, doc, labels=labels)
    for key, value in items:
        fam.add_metric([str(k) for k in key], float(value))
    return fam


def _families(m: Metrics) -> Iterator[Metric]:
    """Every kstream family, by what it describes: the app, its records, its commits, its
    place in the group, and its state."""
    for part in (_app, _records, _commits, _group, _state):
        yield from part(m)


def _app(m: Metrics) -> Iterator[Metric]:
    yield _gauge(
        "kstream_app_info",
        "Always 1; the labels name the app, this instance and its processing guarantee.",
        ["app_id", "instance_id", "guarantee"],
        [((m.app_id, m.instance_id, m.guarantee), 1)],
    )
    yield _gauge(
        "kstream_app_state",
        "1 for the app's current state, 0 for the others.",
        ["state"],
        [((s,), 1 if m.state == s else 0) for s in APP_STATES],
    )
    yield _gauge(
        "kstream_app_start_time_seconds", "When the app started (Unix time).", [], [((), m.started)]
    )


def _records(m: Metrics) -> Iterator[Metric]:
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
        "kstream_dlq_records",
        "Records sent to the dead-letter topic, by kind of error.",
        ["reason"],
        [((r,), n) for r, n in sorted(m.dlq_by_reason.items())],
    )
    yield _histogram("kstream_batch_records", "Records per batch.", m.batch_size)
    yield _histogram(
        "kstream_batch_duration_seconds", "Time to process one batch.", m.batch_duration
    )


def _commits(m: Metrics) -> Iterator[Metric]:
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


def _group(m: Metrics) -> Iterator[Metric]:
    """Where the instance stands in its group: lag, rebalances, and a stalled loop."""
    yield _gauge(
        "kstream_consumer_lag",
        "Records between the committed position and the fetch high watermark, per partition.",
        ["topic", "partition"],
        sorted(list(m.lag.items())),
    )
    yield _gauge(
        "kstream_consumer_lag_seconds",
        "Per partition: 0 when kstream_consumer_lag is 0, else now minus the timestamp of the "
        "last record consumed (how old the position is); absent until a record was consumed.",
        ["topic", "partition"],
        sorted(m.lag_seconds().items()),
    )
    yield _counter(
        "kstream_rebalances", "Rebalances seen by this instance.", [], [((), m.rebalances_total)]
    )
    yield _gauge(
        "kstream_rebalance_duration_seconds",
        "How long the current rebalance has lasted (0 when the app is not rebalancing).",
        [],
        [((), m.rebalance_seconds())],
    )
    yield _gauge(
        "kstream_stream_thread_stalled_seconds",
        "Seconds since the stream thread's loop last turned (near 0 while it runs; /health/live "
        "answers 503 past the watchdog's bound).",
        [],
        [((), m.loop_stalled_seconds())],
    )
    yield _gauge(
        "kstream_kafka_unreachable_seconds",
        "How long the stream thread has been waiting for Kafka to answer again (0 when it "
        "answers).",
        [],
        [((), m.kafka_unreachable_seconds())],
    )
    yield _counter(
        "kstream_rebalances_slow",
        "Rebalances that lasted longer than slow_rebalance_warning (counted when they pass it).",
        [],
        [((), m.slow_rebalances_total)],
    )
    yield _counter(
        "kstream_records_future_timestamp",
        "Input records that moved their task's stream time more than future_timestamp_warning "
        "past the wall clock (records with earlier timestamps are late after them), per input "
        "partition; retried batches count again.",
        ["topic", "partition"],
        sorted(list(m.future_timestamps.items())),
    )
    yield _gauge(
        "kstream_assigned_partitions",
        "Input partitions assigned to this instance.",
        [],
        [((), len(m.assigned))],
    )


def _state(m: Metrics) -> Iterator[Metric]:
    """Restoring, standby and store families."""
    yield _gauge(
        "kstream_restoring_tasks",
        "Tasks whose stores are being restored from changelogs.",
        [],
        [((), m.restoring_tasks)],
    )
    yield _gauge(
        "kstream_standby_tasks",
        "Standby tasks this instance keeps (warm copies of other instances' stores).",
        [],
        [((), m.standby_tasks)],
    )
    yield _gauge(
        "kstream_standby_lag_records",
        "Per standby store partition: changelog records not yet applied (the changelog's end "
        "as last fetched minus the standby's position); what a failover would restore.",
        ["store", "partition"],
        sorted(list(m.standby_lag.items())),
    )
    yield _counter(
        "kstream_standby_records",
        "Changelog records applied by standby tasks.",
        [],
        [((), m.standby_records)],
    )
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
    yield _gauge(
        "kstream_store_entries",
        "Approximate entries per state store, summed over this instance's partitions "
        f"(committed state, without the batch in flight; read every {STORE_SIZE_INTERVAL_S:g} s).",
        ["store"],
        [((s,), n) for s, n in sorted(m.store_entries.items())],
    )
    yield _gauge(
        "kstream_store_size_bytes",
        "Bytes the state store's data occupies (pages in use), summed over this instance's "
        "partitions; only for backends that can tell cheaply (LMDB).",
        ["store"],
        [((s,), n) for s, n in sorted(m.store_bytes.items())],
    )
