"""`KTable.suppress` on Spark, its buffer in Spark's state (issue 46, item 1).

Windowed counts held until their windows close, and a table's updates held for a time limit in
a buffer of at most 3 keys that emits early when full, run on local[2] over 2 partitions with
out-of-order input in micro-batches of 7 records, so the buffer crosses many batches (and the
restarts of their tasks); each key's (value, timestamp) updates are the native runtime's, and
the held updates re-grouped through a repartition topic sum up as they do there. A
buffer that shuts down when full fails the run with its BufferFullError, as on the native
runtime, and writes nothing.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import (
    create_topics,
    final_values,
    finish_native,
    produce,
    read_all,
    start_native,
)

from kstream.dsl import StreamBuilder
from kstream.dsl.suppress import BufferConfig, BufferFullError, Suppressed
from kstream.dsl.windows import TimeWindows
from kstream.topology.topology import Topology

pytest.importorskip("pyspark")

T0 = 1_700_000_000_000


def suppressed(src: str, finals: str, calm: str, totals: str) -> Topology:
    b = StreamBuilder()
    s = b.stream(src, key_serde="string", value_serde="long")
    (
        s.group_by_key()
        .windowed_by(TimeWindows.of(1000, grace=500))
        .count()
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded()))
        .to_stream(lambda k, _v: f"{k.key}@{k.start}")
        .to(finals, key_serde="string", value_serde="long")
    )
    held = (
        s.group_by_key()
        .reduce(lambda a, v: a + v)
        .suppress(Suppressed.until_time_limit(700, BufferConfig.max_records(3)))
    )
    held.to_stream().to(calm, key_serde="string", value_serde="long")
    # the held updates through a repartition topic: each forwarded with its own (older)
    # record's context, which the next task's repeat check must not take for a repeat
    held.group_by(lambda _k, v: ("all", v), key_serde="string", value_serde="long").reduce(
        lambda a, v: a + v, lambda a, v: a - v
    ).to_stream().to(totals, key_serde="string", value_serde="long")
    return b.build()


def per_key(records: list[Any]) -> dict[Any, list[tuple[Any, int]]]:
    out: dict[Any, list[tuple[Any, int]]] = {}
    for r in records:
        out.setdefault(r.key, []).append((r.value, r.timestamp))
    return out


def test_suppress_on_spark_gives_the_native_runtimes_updates(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from kstream.spark import run

    bs = bootstrap_servers
    rng = random.Random(7)
    src = unique_name("in")
    outs = {
        side: tuple(unique_name(f"{side}-{t}") for t in ("finals", "calm", "totals"))
        for side in "sn"
    }
    create_topics(bs, {src: 2, **{t: 2 for pair in outs.values() for t in pair}})
    records = [
        (f"k{rng.randint(0, 7)}", rng.randint(1, 9), T0 + i * 97 + rng.randint(-600, 600))
        for i in range(150)
    ]
    produce(bs, src, records, "string", "long")
    app = start_native(suppressed(src, *outs["n"]), unique_name("native"), bs, str(tmp_path / "n"))
    run(
        suppressed(src, *outs["s"]),
        unique_name("spark"),
        bs,
        str(tmp_path / "spark"),
        spark=spark,
        max_records_per_batch=7,
    )
    finish_native(app, bs)
    for mine, theirs in zip(outs["s"][:2], outs["n"][:2], strict=True):
        got = per_key(read_all(bs, mine, "string", "long"))
        want = per_key(read_all(bs, theirs, "string", "long"))
        assert got == want, mine
        assert sum(len(v) for v in want.values()) > 10
    # the re-grouped total (both partitions' tasks feed it: their order, and so the sums along
    # the way, differ from run to run; each held update counts, none is taken for a repeat)
    totals = final_values(read_all(bs, outs["s"][2], "string", "long"))
    assert totals == final_values(read_all(bs, outs["n"][2], "string", "long"))


def test_a_full_buffer_that_shuts_down_fails_the_run(
    spark: Any, bootstrap_servers: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    from kstream.spark import run

    bs = bootstrap_servers
    src, out = unique_name("in"), unique_name("out")
    create_topics(bs, {src: 1, out: 1})
    produce(bs, src, [(f"k{i}", i, T0 + i) for i in range(5)], "string", "long")
    b = StreamBuilder()
    strict = BufferConfig.max_records(2).shut_down_when_full()
    b.stream(src, key_serde="string", value_serde="long").to_table().suppress(
        Suppressed.until_time_limit(10_000, strict)
    ).to_stream().to(out, key_serde="string", value_serde="long")
    with pytest.raises(BufferFullError, match="exceeded its max capacity"):
        run(b.build(), unique_name("spark"), bs, str(tmp_path / "cp"), spark=spark)
    assert read_all(bs, out, "string", "long") == []
