"""The metric catalogue follows Prometheus conventions (docs/architecture.md)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from support.exposition import lint_exposition

from kstream.metrics import Metrics


def busy_metrics() -> Metrics:
    m = Metrics("clicks", instance_id="i-1", guarantee="exactly_once", stores=["counts"])
    m.set_state("RUNNING")
    m.batch({("clicks", 0): 10, ("clicks", 1): 5}, 0.004)
    m.processed(15)
    m.produced("out", 15)
    m.end_to_end_latency(10_000, [9_990, 9_000, 1_000])
    m.commit(0.02, transactions=2)
    m.transaction_aborted()
    m.dropped("processing_error")
    m.dropped("a reason nobody listed")
    m.dropped("duplicate", 3)
    m.dead_lettered("deserialization", 2)
    m.set_lag("clicks", 0, 7)
    m.rebalance()
    m.set_assigned([("clicks", 0), ("clicks", 1)])
    m.record_operation("counts", 0, "get", 0.0002)
    m.record_operation("counts", 0, "frobnicate", 0.0002)
    m.record_restore("counts", 0, 40, 100)
    m.record_restore("counts", 0, 100, 100)
    return m


def test_the_exposition_follows_prometheus_conventions() -> None:
    text = busy_metrics().render().decode()
    assert lint_exposition(text) == []


def test_values_are_what_was_recorded() -> None:
    text = busy_metrics().render().decode()
    constant = {"app_id": "clicks", "instance_id": "i-1"}
    samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if fam.name.startswith("kstream_"):
                assert {k: s.labels.get(k) for k in constant} == constant, s
            labels = {k: v for k, v in s.labels.items() if k not in constant}
            samples[(s.name, tuple(sorted(labels.items())))] = s.value
    assert (
        samples[("kstream_records_consumed_total", (("partition", "0"), ("topic", "clicks")))] == 10
    )
    assert samples[("kstream_records_dropped_total", (("reason", "duplicate"),))] == 3
    assert samples[("kstream_records_dropped_total", (("reason", "other"),))] == 1
    assert samples[("kstream_dlq_records_total", (("reason", "deserialization"),))] == 2
    assert samples[("kstream_transactions_committed_total", ())] == 2
    assert samples[("kstream_transactions_aborted_total", ())] == 1
    assert samples[("kstream_end_to_end_latency_seconds_count", ())] == 3
    assert samples[("kstream_end_to_end_latency_seconds_bucket", (("le", "0.01"),))] == 1
    assert samples[("kstream_end_to_end_latency_seconds_bucket", (("le", "1.0"),))] == 2
    assert samples[("kstream_end_to_end_latency_seconds_bucket", (("le", "+Inf"),))] == 3
    assert samples[("kstream_app_state", (("state", "RUNNING"),))] == 1
    assert samples[("kstream_app_state", (("state", "ERROR"),))] == 0
    assert samples[("kstream_consumer_lag", (("partition", "0"), ("topic", "clicks")))] == 7
    assert samples[("kstream_assigned_partitions", ())] == 2
    assert samples[("kstream_restore_records_total", (("store", "counts"),))] == 100
    ops = ("kstream_store_operations_total", (("operation", "other"), ("store", "counts")))
    assert samples[ops] == 1


def test_revoked_partitions_lose_their_lag_series() -> None:
    m = busy_metrics()
    m.set_assigned([("clicks", 1)])
    assert "kstream_consumer_lag{" not in m.render().decode()


def test_two_apps_in_one_process_have_separate_registries() -> None:
    a, b = Metrics("a"), Metrics("b")
    a.processed(5)
    assert 'app_id="a"' in a.render().decode()
    assert 'kstream_records_processed_total{app_id="b",instance_id=""} 0.0' in b.render().decode()
    assert 'kstream_records_processed_total{app_id="a",instance_id=""} 5.0' in a.render().decode()
