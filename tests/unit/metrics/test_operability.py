"""The series operators expect: constant app labels, process and GC, store sizes, lag in time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from support.exposition import lint_exposition

from kstream import stores
from kstream.metrics import (
    LATENCY_SAMPLE_EVERY,
    STORE_TIMING_SAMPLE_EVERY,
    Metrics,
)
from kstream.state import open_store


def families(m: Metrics) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(m.render().decode())}


def value(m: Metrics, name: str, **labels: str) -> float | None:
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def test_every_series_carries_the_app_and_instance_labels() -> None:
    m = Metrics("orders", instance_id="host-1", stores=["totals"])
    m.batch({("in", 0): 3}, 0.01)
    fams = families(m)
    assert len(fams) > 20
    for fam in fams.values():
        for s in fam.samples:
            assert s.labels.get("app_id") == "orders", s
            assert s.labels.get("instance_id") == "host-1", s


def test_the_instance_id_set_after_construction_is_used_at_scrape_time() -> None:
    m = Metrics("orders")
    m.instance_id = "named-later"
    assert value(m, "kstream_records_processed_total", instance_id="named-later") == 0


def test_process_gc_and_platform_series_are_on_each_apps_registry() -> None:
    fams = families(Metrics("a", instance_id="i"))
    for name in (
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_gc_collections",
        "python_info",
    ):
        assert name in fams, sorted(fams)
    assert lint_exposition(Metrics("a").render().decode()) == []


def test_lag_seconds_is_zero_when_caught_up_and_the_age_of_the_position_when_behind() -> None:
    m = Metrics("a")
    m.set_assigned([("in", 0), ("in", 1), ("in", 2)])
    now = time.time()
    m.consumed_up_to({("in", 0): int((now - 30) * 1000), ("in", 1): int((now - 30) * 1000)})
    m.set_lag("in", 0, 0)
    m.set_lag("in", 1, 500)
    m.set_lag("in", 2, 9)  # nothing consumed yet: the age is unknown
    secs = m.lag_seconds(now)
    assert secs[("in", 0)] == 0.0
    assert 29.9 < secs[("in", 1)] < 30.1
    assert ("in", 2) not in secs
    fam = families(m)["kstream_consumer_lag_seconds"]
    assert "timestamp of the last record consumed" in fam.documentation
    assert {s.labels["partition"] for s in fam.samples} == {"0", "1"}


def test_revoked_partitions_lose_their_lag_seconds() -> None:
    m = Metrics("a")
    m.set_assigned([("in", 0)])
    m.consumed_up_to({("in", 0): 1})
    m.set_lag("in", 0, 5)
    m.set_assigned([])
    assert m.lag_seconds() == {}


def test_store_entries_and_lmdb_bytes_are_summed_per_store(tmp_path: Path) -> None:
    m = Metrics("a", stores=["mem", "disk", "idle"])
    mem = [
        open_store(stores.key_value("mem"), app_id="a", partition=p, state_dir=str(tmp_path))
        for p in (0, 1)
    ]
    disk = open_store(
        stores.key_value("disk", backend="lmdb"), app_id="a", partition=0, state_dir=str(tmp_path)
    )
    for i in range(10):
        mem[i % 2].put(f"k{i}", i)
    for store in mem:
        store.flush()  # committed
    disk_backend = disk.backend
    disk_backend.write_batch({f"k{i}".encode(): b"x" * 100 for i in range(50)}, [])
    disk.put("pending", 1)  # the batch in flight: not counted until committed
    m.observe_stores(lambda: [*mem, disk])
    assert value(m, "kstream_store_entries", store="mem") == 10
    assert value(m, "kstream_store_entries", store="disk") == 50
    assert value(m, "kstream_store_entries", store="idle") == 0
    size = value(m, "kstream_store_size_bytes", store="disk")
    assert size is not None and size >= 50 * 100
    assert value(m, "kstream_store_size_bytes", store="mem") is None  # memory cannot tell


def test_store_sizes_are_read_at_most_every_interval() -> None:
    m = Metrics("a")
    calls = 0

    def none() -> list[Any]:
        nonlocal calls
        calls += 1
        return []

    m.observe_stores(none)
    m.observe_stores(none)
    assert calls == 1


def test_help_texts_say_what_is_sampled() -> None:
    fams = families(Metrics("a"))
    e2e = fams["kstream_end_to_end_latency_seconds"].documentation
    assert f"one input record in {LATENCY_SAMPLE_EVERY}" in e2e
    store = fams["kstream_store_operation_duration_seconds"].documentation
    assert f"one call in {STORE_TIMING_SAMPLE_EVERY}" in store
    assert "counts timed calls, not operations" in store
    assert "kstream_dedup_dropped" not in fams  # removed: records_dropped{reason="duplicate"}


def test_the_runtime_uses_the_documented_sampling_rates() -> None:
    """The runtime times user stores with the sampling rate the help text states."""
    import inspect

    from kstream.runtime import tasks

    assert "sample_every=STORE_TIMING_SAMPLE_EVERY" in inspect.getsource(tasks)
    assert tasks.STORE_TIMING_SAMPLE_EVERY == STORE_TIMING_SAMPLE_EVERY
