"""The oracle on Spark: generated specs run by the Spark engine on `local[2]` from topics of the
broker, compared with Kafka Streams' answers (tests/spark_oracle/lane.py says how).

`make test-spark-oracle` runs `KSTREAM_SPARK_ORACLE_CASES` generated specs (400) from the
oracle's fixed seed, `KSTREAM_SPARK_ORACLE_BATCH` (20) per Spark run; `KSTREAM_SPARK_ORACLE_SEED`
draws them from another seed, and `KSTREAM_SPARK_ORACLE_ONLY` (operator families as the report
names them, comma-separated) keeps the specs using one of them. The lane's report (what was
compared, what was not and why, by operator family, and the time) is printed and written to
`KSTREAM_SPARK_ORACLE_REPORT` when set.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from lane import (
    Spec,
    ask_kafka_streams,
    compare,
    create_and_fill,
    eventually_comparable,
    has_loop,
    kstreams_own,
    native_answer,
    order_defined,
    prepare,
    report,
    run_on_spark,
    unexplained,
)
from oracle.generate import cases
from oracle.harness import Oracle
from oracle.spec import Case

CASES = int(os.environ.get("KSTREAM_SPARK_ORACLE_CASES", "400"))
BATCH = int(os.environ.get("KSTREAM_SPARK_ORACLE_BATCH", "20"))
SEED = os.environ.get("KSTREAM_SPARK_ORACLE_SEED")
REPORT = os.environ.get("KSTREAM_SPARK_ORACLE_REPORT")
# only the specs using one of these operator families (`lane.families`; comma-separated)
ONLY = {f for f in os.environ.get("KSTREAM_SPARK_ORACLE_ONLY", "").split(",") if f}


def generated(n: int, seed: str | None = None) -> list[Case]:
    """`n` generated cases: the oracle's fixed ones (as `make test` draws), or from `seed`."""
    out: list[Case] = []

    @settings(
        max_examples=n,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        derandomize=seed is None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases())
    def draw(case: Case) -> None:
        out.append(case)

    if seed is not None:
        draw = hypothesis_seed(int(seed))(draw)
    draw()
    return out


@pytest.mark.timeout(0)  # the lane's length is its case count's (its report gives the time)
def test_generated_specs_on_spark_give_kafka_streams_answers(
    spark: Any, oracle: Oracle, bootstrap_servers: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    run_id = uuid.uuid4().hex[:3]
    specs = prepare(generated(CASES, SEED), f"so{run_id}")
    if ONLY:
        specs = [s for s in specs if s.families & ONLY]
    ask_kafka_streams(oracle, specs)
    todo = [s for s in specs if s.skip is None and s.expected_failure is None]
    batches = [todo[i : i + BATCH] for i in range(0, len(todo), BATCH)]
    # a spec Kafka Streams fails on (as it may expect) fails its Spark run: alone, each
    batches += [[s] for s in specs if s.skip is None and s.expected_failure is not None]
    spark_s = 0.0
    failed_batches: list[str] = []
    for k, batch in enumerate(batches):
        # as long as the harness's "oracle": a suppress buffer's byte bound counts the names
        # of repartition topics, which start with the application id
        app_id = f"o{run_id}{k:02d}"
        for s in batch:
            undefined = order_defined(s.case, app_id)
            if undefined is not None and eventually_comparable(s.case):
                s.final_only = True  # its output tables' final contents are defined
            elif undefined is not None:
                s.skip = "order not defined on a broker"
                s.differences = [undefined]
        batch = [s for s in batch if s.skip is None]
        if not batch:
            continue
        create_and_fill(bootstrap_servers, batch)
        t0 = time.monotonic()
        error = run_on_spark(spark, bootstrap_servers, batch, app_id, tmp_path)
        if error is not None:
            failed_batches.append(unexplained(app_id, error))
        spark_s += time.monotonic() - t0
        for s in batch:
            compare(s)
            timing = s.error is None and s.expected_failure is None and not s.final_only
            if s.differences and timing and has_loop(s.case):
                # a foreign-key join's intermediate results depend on when its answers come
                # back (lane.py): its final contents, where they are defined
                if eventually_comparable(s.case):
                    s.final_only = True
                    compare(s)
                else:
                    s.skip = "a foreign-key join's intermediate results (timing of its answers)"
            s.kstreams_own = bool(s.differences) and kstreams_own(s)
        print(f"batch {k}: {len(batch)} specs in {time.monotonic() - t0:.1f} s", flush=True)
    text = report(specs, time.monotonic() - started, spark_s, len(batches), failed_batches)
    print(text)
    if REPORT:
        Path(REPORT).write_text(text + "\n")
    # a difference of kstream's own operators (the native engine's too) is the oracle's
    # (tests/oracle) to report: the lane reports it and fails on the Spark engine's only
    differing = [s for s in specs if s.skip is None and s.differences and not s.kstreams_own]
    assert not differing, "\n\n".join(_explained(s) for s in differing[:10])
    assert not failed_batches, "\n".join(failed_batches)


def _explained(spec: Spec) -> str:
    return "\n".join(
        [
            f"spec {spec.index} differs on Spark:",
            *spec.differences,
            native_answer(spec),
            "case:",
            spec.case.pretty(),
        ]
    )
