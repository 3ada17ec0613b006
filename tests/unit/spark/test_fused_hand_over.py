"""A fused hop's hand-over (`kstream.spark.fusion`): what upstream read tasks pack per
destination partition is what the downstream task reads, in the order the repartition topic's
write slot would have written it, whatever order the shuffle delivers the blobs in."""

from __future__ import annotations

import pickle
from typing import Any

from kstream.spark.fusion import _by_destination, fused_input

HOP = {"app-repartition"}
COLUMNS = ("topic", "k", "v", "ts", "part", "ptopic", "ppart", "poff", "seq", "h")


def outputs(upstream: int, rows: list[tuple[Any, ...]]) -> dict[str, list[Any]]:
    """One upstream task's output columns: rows of (topic, key, ts, part, input offset)."""
    cols: dict[str, list[Any]] = {n: [] for n in COLUMNS}
    for topic, key, ts, part, off in rows:
        for name, value in zip(
            COLUMNS,
            (topic, key, b"v-%d-%d" % (upstream, off), ts, part, "in", upstream, off, 0, None),
            strict=True,
        ):
            cols[name].append(value)
    return cols


def hand_over(tasks: dict[int, list[tuple[Any, ...]]]) -> dict[int, list[bytes]]:
    """Each upstream task's outputs packed per destination, gathered per destination."""
    by_dest: dict[int, list[bytes]] = {}
    for upstream, rows in tasks.items():
        batch = _by_destination(outputs(upstream, rows), HOP, upstream)
        dests = batch.column("partition").to_pylist()
        for dest, blob in zip(dests, batch.column("rows").to_pylist(), strict=True):
            by_dest.setdefault(dest, []).append(blob)
    return by_dest


TASKS: dict[int, list[tuple[Any, ...]]] = {
    0: [
        ("app-repartition", b"a", 10, 1, 0),
        ("app-repartition", b"b", 30, 0, 1),
        ("dead-letters", b"x", 35, None, 2),
        ("app-repartition", b"c", 50, 1, 3),
    ],
    1: [
        ("app-repartition", b"d", 20, 1, 7),
        ("app-repartition", b"e", 40, 0, 8),
        ("app-repartition", b"f", 45, 1, 9),
    ],
}


def test_each_destination_reads_its_rows_interleaved_by_time_with_offsets_from_where_it_was() -> (
    None
):
    by_dest = hand_over(TASKS)
    assert sorted(by_dest) == [0, 1]
    nxt = {("app-repartition", 1): 100}
    got = fused_input(by_dest[1], HOP, nxt)
    assert [(r.key, r.timestamp, r.topic, r.partition, r.offset) for r in got.records] == [
        (b"a", 10, "app-repartition", 1, 100),
        (b"d", 20, "app-repartition", 1, 101),
        (b"f", 45, "app-repartition", 1, 102),
        (b"c", 50, "app-repartition", 1, 103),
    ]
    assert [r.value for r in got.records][:2] == [b"v-0-0", b"v-1-7"]
    assert nxt == {("app-repartition", 1): 104}
    assert got.passing["seq"] == []


def test_a_row_for_another_topic_passes_to_the_sink_with_the_upstream_partition() -> None:
    by_dest = hand_over(TASKS)
    nxt: dict[tuple[str, int], int] = {}
    got = fused_input(by_dest[0], HOP, nxt)
    assert [(r.key, r.offset) for r in got.records] == [(b"b", 0), (b"e", 1)]
    assert got.passing["topic"] == ["dead-letters"]
    assert (got.passing["k"], got.passing["ppart"], got.passing["poff"]) == ([b"x"], [0], [2])
    assert got.passing["part"] == [None]


def test_the_shuffle_order_of_the_blobs_does_not_change_what_a_task_reads() -> None:
    by_dest = hand_over(TASKS)
    forward = fused_input(by_dest[1], HOP, {})
    backward = fused_input(list(reversed(by_dest[1])), HOP, {})
    assert [(r.key, r.offset) for r in forward.records] == [
        (r.key, r.offset) for r in backward.records
    ]


def test_headers_cross_the_hop() -> None:
    cols = outputs(0, [("app-repartition", b"a", 5, 0, 0)])
    cols["h"] = [pickle.dumps([("trace", b"1"), ("empty", None)], protocol=5)]
    batch = _by_destination(cols, HOP, 0)
    got = fused_input(batch.column("rows").to_pylist(), HOP, {})
    assert [list(r.headers) for r in got.records] == [[("trace", b"1"), ("empty", None)]]
