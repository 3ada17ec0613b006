"""`to(chooser)` on Spark: the sink writes whatever topic the chooser names (issue 46, item 1).

A stateful part (a count per key) and a stateless one (a filter) each write through a topic
chooser to two topics that the topology never names, one of 1 partition and one of 3. On
local[2] and the session broker, Spark writes the records the native runtime writes, each on
the partition its key gives in the chosen topic (its real partition count, looked up by the
task), in the slot's transaction (a read_committed reader sees them; under broker_compat each
is stamped with its provenance id, as the sink's writer stamps it). A chooser that names a
missing topic fails the task with TopicError naming the topic, as on the native runtime.
"""

from __future__ import annotations

import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import create_topics, finish_native, produce, read_all, start_native

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.errors import TopicError
from kstream.kafka.partitioner import default_partition
from kstream.serde import serde
from kstream.state import provenance
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")


class Chooser:
    """Keys before "k3" go to `low`, the others to `high` (a picklable chooser)."""

    def __init__(self, low: str, high: str) -> None:
        self.low, self.high = low, high

    def __call__(self, key: Any, value: Any, ctx: Any) -> str:
        return self.low if key < "k3" else self.high


def chooser_topology(src: str, counts: Chooser, passed: Chooser) -> Topology:
    b = StreamBuilder()
    s = b.stream(src, key_serde="string", value_serde="long")
    s.group_by_key().count().to_stream().to(counts, key_serde="string", value_serde="long")
    s.filter(lambda _k, v: v % 2 == 0).to(passed, key_serde="string", value_serde="long")
    return b.build()


def test_a_topic_chooser_writes_the_topics_it_names_as_on_native(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from kstream.spark import run

    bs = bootstrap_servers
    src = unique_name("in")
    outs = {side: [unique_name(f"{side}-{t}") for t in ("c1", "c3", "p1", "p3")] for side in "sn"}
    create_topics(bs, {src: 2})
    for side in "sn":
        c1, c3, p1, p3 = outs[side]
        create_topics(bs, {c1: 1, c3: 3, p1: 1, p3: 3})
    records = [(f"k{i % 6}", i, 1000 + i) for i in range(60)]
    produce(bs, src, records, "string", "long")

    def built(side: str) -> Topology:
        c1, c3, p1, p3 = outs[side]
        return chooser_topology(src, Chooser(c1, c3), Chooser(p1, p3))

    app = start_native(built("n"), unique_name("native"), bs, str(tmp_path / "native"))
    run(built("s"), unique_name("spark"), bs, str(tmp_path / "spark"), spark=spark)
    finish_native(app, bs)

    stamped = Config().broker_compat == "tansu"
    for spark_topic, native_topic, parts in zip(outs["s"], outs["n"], (1, 3, 1, 3), strict=True):
        got = read_all(bs, spark_topic, "string", "long", keep_repeats=True)
        on_native = read_all(bs, native_topic, "string", "long", keep_repeats=True)
        assert Counter((r.key, r.value) for r in got) == Counter(
            (r.key, r.value) for r in on_native
        )
        assert got, spark_topic
        keys = serde("string")
        for r in got:
            assert r.partition == default_partition(keys.to_bytes(r.key) or b"", parts)
            # the slot stamps its provenance id under broker_compat only
            assert (provenance.from_headers(list(r.headers)) is not None) == stamped
    counts = {r.key: r.value for t in outs["s"][:2] for r in read_all(bs, t, "string", "long")}
    assert counts == {f"k{i}": 10 for i in range(6)}


class _NoTopics:
    """A client supplier whose producers' metadata has no topics (the lookup's cluster)."""

    def producer(self, config: Any) -> Any:
        metadata = type("Metadata", (), {"topics": {}})()
        raw = type("Raw", (), {"list_topics": lambda self, topic, timeout: metadata})()
        return type("Producer", (), {"raw": raw, "close": lambda self: None})()


def test_a_chooser_naming_a_missing_topic_fails_the_task() -> None:
    """The task looks a chosen topic up once; a topic the cluster lacks raises TopicError
    naming it (on a broker that creates topics on demand the lookup creates it instead, as a
    Kafka Streams producer's metadata request does)."""
    from kstream.spark.tasks import TaskPlan, chosen_topic_partitions

    plan = TaskPlan("app", None, [], {}, {}, set(), [])  # type: ignore[arg-type]
    plan.bootstrap_servers = "nowhere:9092"
    plan.client_supplier = _NoTopics()  # type: ignore[assignment]
    with pytest.raises(TopicError, match="'missing-topic', named by a topic chooser"):
        chosen_topic_partitions(plan, "missing-topic")


def test_a_tasks_kstream_error_reaches_the_driver_as_itself() -> None:
    """Spark hands the driver a worker's failure as text: the note `in_worker` attaches lets
    the driver raise the task's own TopicError (its code kept), not Spark's wrapper."""
    from kstream.spark.failure import in_worker, raise_failure

    try:
        with in_worker():
            raise TopicError("topic 'x' does not exist", code="UNKNOWN_TOPIC_OR_PART")
    except TopicError as e:
        text = "".join(traceback.format_exception(e))
    with pytest.raises(TopicError, match="topic 'x' does not exist") as raised:
        raise_failure(RuntimeError(f"StreamingQueryException: ...\n{text}\n\tat org.apache"))
    assert raised.value.code == "UNKNOWN_TOPIC_OR_PART"
