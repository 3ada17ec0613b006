"""A re-keying sub-topology and the stateful one it feeds as one query (`kstream.spark.fusion`).

The repartition hop is Spark's shuffle: the windowed count's results equal the test driver's,
the repartition topic stays empty, and a dead letter the re-keying step writes reaches its
topic through the count's query. A checkpoint written with two queries (the re-keying one's
has batches) keeps them, so what was in the repartition topic is still read. Everything is
read back with a plain read_committed consumer (`support.committed_reader`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics, produce_raw
from support.committed_reader import read_committed
from support.dead_letter_topic import bad_input, check_dead_letter_topic
from windowed_counts import expected as driver_expected
from windowed_counts import json_records, run_on_spark, spark_outputs, windowed_count

from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

Names = Callable[[str], str]


def by_n_mod_3() -> Callable[[str, Any], str]:
    """The re-keying function: a lambda, so Spark's workers get it by value (cloudpickle)."""
    return lambda _key, value: f"g{value['n'] % 3}"


def regrouped_windowed_count(inp: str, out: str) -> Topology:
    """`inp` (JSON values) re-keyed by `n % 3`, counted per 1-second window to `out`."""
    return windowed_count(inp, out, by_n_mod_3())


def good_input(n: int) -> list[tuple[bytes, bytes, int, list[Any]]]:
    return json_records(n)


def expected(inp: str, out: str, records: list[tuple[bytes, bytes, int, Any]]) -> Any:
    """The test driver's outputs for the good records."""
    return driver_expected(inp, out, records, by_n_mod_3())


def hop_topic(app: str, inp: str, out: str) -> str:
    from kstream.spark.tasks import build_task_plan

    (topic,) = build_task_plan(regrouped_windowed_count(inp, out), app).repartition_topics
    return topic


def run(spark: Any, app: str, bs: str, tmp: Path, inp: str, out: str, **config: Any) -> None:
    run_on_spark(spark, regrouped_windowed_count(inp, out), app, bs, tmp, 40, **config)


def test_the_hop_is_spark_s_shuffle_and_a_dead_letter_passes_through(
    spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Path
) -> None:
    """One input partition with a record that is not JSON: the re-keying step (in the read
    tasks) sends it to the dead-letter topic, through the count's task and sink."""
    bs = bootstrap_servers
    inp, out, dlq = unique_name("in"), unique_name("out"), unique_name("dlq")
    create_topics(bs, {inp: 1, out: 1, dlq: 2})
    records = bad_input()
    produce_raw(bs, inp, records)
    app = unique_name("fused")
    run(spark, app, bs, tmp_path, inp, out, on_deserialization_error="dlq", dlq_topic=dlq)
    want = expected(inp, out, records)
    assert sum(want.values()) == 50
    assert spark_outputs(bs, out) == want
    check_dead_letter_topic(bs, dlq, inp, 2)
    assert read_committed(bs, hop_topic(app, inp, out)) == []


def test_two_partitions_over_batches_and_a_checkpoint_from_two_queries(
    spark: Any,
    bootstrap_servers: str,
    unique_name: Names,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Fused, over two partitions and several batches: the driver's results, nothing in the
    repartition topic. An app whose checkpoint has the re-keying step's own query (written
    unfused: `fusable` finding nothing, as before the fusion) keeps it on its next run: the
    second half of the input goes through the repartition topic too, and the results over
    both runs are the driver's."""
    from kstream.spark import plan as spark_plan

    bs = bootstrap_servers
    inp, fused_out, kept_out = unique_name("in"), unique_name("fused"), unique_name("kept")
    create_topics(bs, {inp: 2, fused_out: 2, kept_out: 2})
    records = good_input(300)
    produce_raw(bs, inp, records[:150])

    with monkeypatch.context() as m:
        m.setattr(spark_plan, "fusable", lambda plan: {})
        kept = unique_name("kept")
        run(spark, kept, bs, tmp_path, inp, kept_out)
    hop = hop_topic(kept, inp, kept_out)
    first = len(read_committed(bs, hop))
    assert first == 150

    produce_raw(bs, inp, records[150:])
    run(spark, kept, bs, tmp_path, inp, kept_out)
    assert len(read_committed(bs, hop)) == 300  # the re-keying query went on
    assert spark_outputs(bs, kept_out) == expected(inp, kept_out, records)

    fused = unique_name("fused")
    run(spark, fused, bs, tmp_path, inp, fused_out)
    assert spark_outputs(bs, fused_out) == expected(inp, fused_out, records)
    assert read_committed(bs, hop_topic(fused, inp, fused_out)) == []
