"""Grouped-stream aggregations against Kafka Streams' own tests (cache disabled).

Kafka gives an aggregation result the largest timestamp of the records that went into it
(`KStreamAggregate`/`KStreamReduce` keep it in a timestamped store) and skips records with a
null key or value; every case checks `(key, value, timestamp)` in order and the drop counts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kstream.dsl import KTable, StreamBuilder
from kstream.dsl.grouped import KGroupedStream
from kstream.testing.driver import TopologyTestDriver

Triple = tuple[Any, Any, int]

# KGroupedStreamImplTest.processData: the last record has a null value (skipped, counted).
PROCESS_DATA: list[Triple] = [
    ("1", "A", 5),
    ("2", "B", 1),
    ("1", "C", 3),
    ("1", "D", 10),
    ("3", "E", 8),
    ("3", "F", 9),
    ("3", None, 12),
]


def run(
    build: Callable[[KGroupedStream], KTable],
    records: list[Triple],
    value_serde: str = "string",
    **driver_args: Any,
) -> tuple[list[Triple], dict[str, int], TopologyTestDriver]:
    b = StreamBuilder()
    build(
        b.stream("topic", key_serde="string", value_serde="string").group_by_key()
    ).to_stream().to("out", key_serde="string", value_serde=value_serde)
    d = TopologyTestDriver(b, **driver_args)
    src = d.input_topic("topic", key_serde="string", value_serde="string")
    for k, v, ts in records:
        src.pipe(k, v, ts)
    out = [
        (r.key, r.value, r.timestamp)
        for r in d.output_topic("out", key_serde="string", value_serde=value_serde).read_records()
    ]
    return out, d.dropped_records(), d


def string_adder(agg: str, v: str) -> str:
    """Kafka's `MockReducer.STRING_ADDER`."""
    return f"{agg}+{v}"


def test_reduce_result_carries_the_largest_timestamp() -> None:
    """KGroupedStreamImplTest.shouldReduceAndMaterializeResults."""
    out, dropped, d = run(lambda g: g.reduce(string_adder, store="reduce"), PROCESS_DATA)
    assert out == [
        ("1", "A", 5),
        ("2", "B", 1),
        ("1", "A+C", 5),
        ("1", "A+C+D", 10),
        ("3", "E", 8),
        ("3", "E+F", 9),
    ]
    assert dropped == {"null_value": 1}
    store = d.get_store("reduce")
    assert [tuple(store.get_with_timestamp(k)) for k in ("1", "2", "3")] == [
        ("A+C+D", 10),
        ("B", 1),
        ("E+F", 9),
    ]
    assert store.get("1") == "A+C+D"
    d.close()


def test_aggregate_result_carries_the_largest_timestamp() -> None:
    """KGroupedStreamImplTest.shouldAggregateAndMaterializeResults (MockInitializer.STRING_INIT,
    MockAggregator.TOSTRING_ADDER)."""
    out, dropped, d = run(
        lambda g: g.aggregate(lambda: "0", lambda _k, v, agg: f"{agg}+{v}", store="aggregate"),
        PROCESS_DATA,
    )
    assert out == [
        ("1", "0+A", 5),
        ("2", "0+B", 1),
        ("1", "0+A+C", 5),
        ("1", "0+A+C+D", 10),
        ("3", "0+E", 8),
        ("3", "0+E+F", 9),
    ]
    assert dropped == {"null_value": 1}
    assert tuple(d.get_store("aggregate").get_with_timestamp("3")) == ("0+E+F", 9)
    d.close()


def test_count_result_carries_the_largest_timestamp() -> None:
    """KGroupedStreamImplTest.shouldCountAndMaterializeResults."""
    out, dropped, d = run(lambda g: g.count(store="count"), PROCESS_DATA, value_serde="long")
    assert out == [("1", 1, 5), ("2", 1, 1), ("1", 2, 5), ("1", 3, 10), ("3", 1, 8), ("3", 2, 9)]
    assert dropped == {"null_value": 1}
    store = d.get_store("count")
    assert [tuple(store.get_with_timestamp(k)) for k in ("1", "2", "3")] == [
        (3, 10),
        (1, 1),
        (2, 9),
    ]
    d.close()


def test_null_keys_and_values_are_skipped_and_counted() -> None:
    """KGroupedStreamImplTest.shouldLogAndMeasureSkipsInAggregate and
    shouldLogAndMeasureSkipsInReduce:
    `KStreamAggregate` skips a null key or value and records it in the dropped-records sensor."""
    records: list[Triple] = [("1", "A", 5), (None, "B", 6), ("1", None, 7), ("1", "C", 4)]
    out, dropped, d = run(lambda g: g.count(), records, value_serde="long")
    assert out == [("1", 1, 5), ("1", 2, 5)]
    assert dropped == {"null_key": 1, "null_value": 1}
    d.close()


def test_group_by_drops_null_keys_before_the_repartition_topic() -> None:
    """docs/streams/developer-guide/dsl-api.html, "Aggregating": records with null keys are
    ignored (here by the null-key filter in front of the repartition topic, as in Kafka's
    `KStreamImpl.createRepartitionedSource`), and results carry the largest timestamp."""
    b = StreamBuilder()
    (
        b.stream("words", key_serde="string", value_serde="string")
        .group_by(lambda _k, v: None if v == "skip" else v[0], key_serde="string")
        .count()
        .to_stream()
        .to("out", key_serde="string", value_serde="long")
    )
    with TopologyTestDriver(b) as d:
        src = d.input_topic("words", key_serde="string", value_serde="string")
        for v, ts in [("apple", 20), ("avocado", 11), ("skip", 30), ("banana", 7), ("acorn", 25)]:
            src.pipe(None, v, ts)
        out = d.output_topic("out", key_serde="string", value_serde="long").read_records()
        assert [(r.key, r.value, r.timestamp) for r in out] == [
            ("a", 1, 20),
            ("a", 2, 20),
            ("b", 1, 7),
            ("a", 3, 25),
        ]
        assert d.dropped_records() == {"null_key": 1}


@pytest.mark.parametrize("backend", ["lmdb", "memory"])
def test_stored_timestamp_survives_a_restart_and_a_restore(tmp_path: Path, backend: str) -> None:
    """KGroupedStreamImplTest.shouldReduceAndMaterializeResults, across a restart: the timestamp
    lives in the store (and in its changelog), so a restarted task still gives the next result
    the largest timestamp seen before it stopped. With lmdb the local state is reopened; with
    memory it is restored from the records the first run logged (a key-value store logs its
    stored bytes as they are)."""
    first, _, d1 = run(
        lambda g: g.reduce(string_adder, store="reduce"),
        [("1", "A", 50)],
        state_dir=str(tmp_path),
        default_backend=backend,
    )
    with d1.get_store("reduce").backend.range() as cur:
        changelog = list(cur)
    d1.close()
    assert first == [("1", "A", 50)]
    assert len(changelog) == 1
    b = StreamBuilder()
    (
        b.stream("topic", key_serde="string", value_serde="string")
        .group_by_key()
        .reduce(string_adder, store="reduce")
        .to_stream()
        .to("out", key_serde="string", value_serde="string")
    )
    with TopologyTestDriver(b, state_dir=str(tmp_path), default_backend=backend) as d2:
        store = d2.get_store("reduce")
        if backend == "memory":
            assert store.get("1") is None
            store.apply_changelog(changelog, None)
        assert tuple(store.get_with_timestamp("1")) == ("A", 50)
        d2.input_topic("topic", "string", "string").pipe("1", "B", 20)
        out = d2.output_topic("out", "string", "string").read_records()
        assert [(r.key, r.value, r.timestamp) for r in out] == [("1", "A+B", 50)]
