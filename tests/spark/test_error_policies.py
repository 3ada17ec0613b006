"""The error policies on Spark, record for record as on the native engine.

Each case runs one topology over the bad input (`bad_input.INPUT`: offset 3 is not JSON,
offset 6 divides by zero) on Spark local[2] and on the native runtime (same broker, same input
topics, output and dead-letter topics of its own), with one choice of
`on_deserialization_error` / `on_processing_error`. Spark must write the native engine's
outputs and dead letters (key, value, timestamp, headers less the provenance id the Spark sink
stamps on every record), and where the native app fails, fail with the very same kstream error
(kind, one-line message, topic, partition, offset), not Spark's wrapper, and write nothing of
the failed batch.

The cases cover fail, skip and dlq for both kinds of error in each shape of query Spark runs
(`shape`: per sub-topology, `read` when it runs inside the source's read tasks, `state` when
its tasks keep Spark state):
- a stateless topology, one query in the read tasks: `stateless-skip-dlq` and a failure of
  each kind;
- an aggregation: `aggregate-dlq-skip` (dead letters of records that do not deserialize, a
  skip in the aggregator);
- a user processor: `processor-skip` and a failure of each kind;
- a stateless and an aggregating sub-topology side by side: `both-dlq`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bad_input import (
    BAD_JSON,
    GOOD,
    ZERO,
    Read,
    Topics,
    TopologyOf,
    by_origin,
    check_dead_letter,
    input_records,
    only_aggregate,
    only_stateless,
    stateless_and_aggregate,
    user_processor,
)
from spark_helpers import create_topics, final_table, finish_native, produce_raw, read_back
from support.groups import fast_group

from kstream.errors import DeserializationError, ProcessingError, RecordError
from kstream.runtime import App, AppState

pytest.importorskip("pyspark")

Names = Callable[[str], str]


@dataclass(frozen=True)
class Case:
    """A topology, the two policies, the shape of Spark's queries, and what must come out: the
    output topics written (`a`: `out_a`, a stream; `b`: `out_b`, a table), the dead letters
    (input `a` or `b`, offset), or the failure (kind, offset in `a`)."""

    topology: TopologyOf
    on_deserialization_error: str
    on_processing_error: str
    shape: tuple[str, ...]
    writes: tuple[str, ...] = ()
    dead: tuple[tuple[str, int], ...] = ()
    fails_at: tuple[type[RecordError], int] | None = None

    def config(self, dlq: str, state_dir: str) -> dict[str, Any]:
        return {
            "on_deserialization_error": self.on_deserialization_error,
            "on_processing_error": self.on_processing_error,
            "dlq_topic": dlq,
            "state_dir": state_dir,
        }


FAILS_ON_JSON = (DeserializationError, BAD_JSON)
FAILS_ON_ZERO = (ProcessingError, ZERO)
READ, STATE = ("read",), ("state",)
CASES = {
    "stateless-skip-dlq": Case(only_stateless, "skip", "dlq", READ, ("a",), (("a", ZERO),)),
    "stateless-fail-deserialization": Case(
        only_stateless, "fail", "skip", READ, fails_at=FAILS_ON_JSON
    ),
    "stateless-fail-processing": Case(only_stateless, "skip", "fail", READ, fails_at=FAILS_ON_ZERO),
    "aggregate-dlq-skip": Case(only_aggregate, "dlq", "skip", STATE, ("b",), (("b", BAD_JSON),)),
    "processor-skip": Case(user_processor, "skip", "skip", STATE, ("a",)),
    "processor-fail-deserialization": Case(
        user_processor, "fail", "skip", STATE, fails_at=FAILS_ON_JSON
    ),
    "processor-fail-processing": Case(
        user_processor, "skip", "fail", STATE, fails_at=FAILS_ON_ZERO
    ),
    "both-dlq": Case(
        stateless_and_aggregate,
        "dlq",
        "dlq",
        ("read", "state"),
        ("a", "b"),
        (("a", BAD_JSON), ("a", ZERO), ("b", BAD_JSON), ("b", ZERO)),
    ),
}
# what the dead letter of each bad record says: its exception and words of its message
WHY = {BAD_JSON: ("SerdeError", "invalid JSON"), ZERO: ("ZeroDivisionError", "division")}


def outputs(bootstrap: str, topic: str) -> list[Read]:
    return read_back(bootstrap, topic, "string", "long")


def dead_letters(bootstrap: str, topic: str) -> list[Read]:
    return by_origin(read_back(bootstrap, topic, "bytes", "bytes"))


def spark_shape(topology: Any, app_id: str) -> tuple[str, ...]:
    """Per sub-topology (upstream first), whether Spark runs it in the read tasks or in tasks
    with Spark state."""
    from kstream.spark.tasks import build_task_plan

    plan = build_task_plan(topology, app_id)
    return tuple("state" if sid in plan.stateful else "read" for sid in plan.order)


@pytest.mark.parametrize("name", list(CASES))
def test_policy_on_spark_as_on_native(
    name: str, spark: Any, bootstrap_servers: str, unique_name: Names, tmp_path: Path
) -> None:
    from kstream.spark import run

    case = CASES[name]
    bs = bootstrap_servers
    a, b = unique_name("in-a"), unique_name("in-b")
    create_topics(bs, {a: 1, b: 1})
    for topic in (a, b):
        produce_raw(bs, topic, input_records())
    on_spark = Topics(a, b, unique_name("spark-a"), unique_name("spark-b"))
    on_native = Topics(a, b, unique_name("native-a"), unique_name("native-b"))
    spark_dlq, native_dlq = unique_name("spark-dlq"), unique_name("native-dlq")
    spark_config = case.config(spark_dlq, str(tmp_path / "spark"))
    topology = case.topology(on_spark)
    spark_id = unique_name("spark")
    assert spark_shape(topology, spark_id) == case.shape

    native_id = unique_name("native")
    native_config = case.config(native_dlq, str(tmp_path / native_id))
    app = App(case.topology(on_native), native_id, bs, "exactly_once", fast_group(native_config))
    app.start()
    try:
        run(topology, spark_id, bs, str(tmp_path / "checkpoint"), spark=spark, config=spark_config)
    except RecordError as e:
        spark_error: RecordError | None = e
    else:
        spark_error = None

    if case.fails_at is not None:
        kind, offset = case.fails_at
        assert app.wait_for(AppState.ERROR, timeout=120), app.state
        app.close()
        native_error = app.error
        assert type(native_error) is kind, native_error
        assert type(spark_error) is kind, spark_error
        assert (spark_error.topic, spark_error.partition, spark_error.offset) == (a, 0, offset)
        assert str(spark_error) == str(native_error)
        assert "\n" not in str(spark_error)
        # nothing of the failed batch (here every record) was written
        assert outputs(bs, on_spark.out_a) == []
        return

    assert spark_error is None
    finish_native(app, bs)
    if "a" in case.writes:  # a stream: record for record
        got = outputs(bs, on_spark.out_a)
        assert got == outputs(bs, on_native.out_a)
        assert [(k, v) for k, v, _ts, _h in got] == list(GOOD.items())
    if (
        "b" in case.writes
    ):  # a table: updates depend on each engine's caching, compare where it ends
        table = final_table((k, v) for k, v, _ts, _h in outputs(bs, on_spark.out_b))
        assert table == final_table((k, v) for k, v, _ts, _h in outputs(bs, on_native.out_b))
        assert table == GOOD
    dead = dead_letters(bs, spark_dlq)
    assert dead == dead_letters(bs, native_dlq)
    assert len(dead) == len(case.dead)
    for rec, (src, offset) in zip(dead, case.dead, strict=True):
        check_dead_letter(rec, a if src == "a" else b, offset, *WHY[offset])
