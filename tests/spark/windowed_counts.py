"""A windowed count to an output topic, for the Spark tests that check where its rows go.

The topology (`windowed_count`, re-keyed first when given a key function), JSON input records
(`json_records`), the test driver's outputs for them (`expected`) and what a plain
read_committed consumer reads from the output topic (`spark_outputs`, `support.committed_reader`:
no kstream code in the reader), each as a Counter of (windowed key, count).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_helpers import driver_outputs
from support.committed_reader import read_committed

from kstream.dsl import StreamBuilder
from kstream.dsl.windowed import time_windowed_serde
from kstream.dsl.windows import TimeWindows
from kstream.topology.topology import Topology

WINDOW_MS = 1_000
T0 = 1_700_000_000_000
Regroup = Callable[[str, Any], str]


def windowed_count(inp: str, out: str, regroup: Regroup | None = None) -> Topology:
    """`inp` (JSON values) counted per key (or per `regroup(key, value)`) and 1-second window
    to `out`."""
    b = StreamBuilder()
    stream = b.stream(inp, key_serde="string", value_serde="json")
    grouped = (
        stream.group_by_key() if regroup is None else stream.group_by(regroup, key_serde="string")
    )
    (
        grouped.windowed_by(TimeWindows.of(WINDOW_MS, grace=3_600_000))
        .count()
        .to_stream()
        .to(out, key_serde=time_windowed_serde("string", WINDOW_MS), value_serde="long")
    )
    return b.build()


def json_records(
    n: int, keys: int | None = None, start: int = 0
) -> list[tuple[bytes, bytes, int, list[Any]]]:
    """Records `start`..`n-1`, JSON `{"n": i}`, keyed `k<i>` (or `k<i % keys>`), their
    timestamps spread over 5 seconds out of order."""
    return [
        (
            f"k{i if keys is None else i % keys}".encode(),
            json.dumps({"n": i}).encode(),
            T0 + (i * 97) % 5_000,
            [],
        )
        for i in range(start, n)
    ]


def expected(
    inp: str,
    out: str,
    records: list[tuple[bytes, bytes, int, Any]],
    regroup: Regroup | None = None,
) -> Counter[Any]:
    """The test driver's outputs for the records whose values are JSON objects."""
    good = [
        (k.decode(), json.loads(v), ts)
        for k, v, ts, _h in records
        if v.startswith(b"{") and v.endswith(b"}")
    ]
    ref = driver_outputs(
        windowed_count(inp, out, regroup),
        {inp: ("string", "json", good)},
        {out: (time_windowed_serde("string", WINDOW_MS), "long")},
    )
    return Counter(ref[out])


def spark_outputs(bootstrap: str, out: str) -> Counter[Any]:
    keys = time_windowed_serde("string", WINDOW_MS)
    return Counter(
        (keys.from_bytes(r.key), int.from_bytes(r.value or b"", "big", signed=True))
        for r in read_committed(bootstrap, out)
    )


def run_on_spark(
    spark: Any, topology: Topology, app: str, bs: str, tmp: Path, batch: int, **config: Any
) -> None:
    """`kstream.spark.run` of `topology` to the end of its input, `batch` records a batch, its
    checkpoint and state under `tmp / app`."""
    from kstream.spark import run

    run(
        topology,
        app,
        bs,
        str(tmp / app / "checkpoint"),
        spark=spark,
        config={"state_dir": str(tmp / app / "state"), **config},
        max_records_per_batch=batch,
    )
