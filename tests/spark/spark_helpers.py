"""Feeding topics, reading them back the way a kstream reader does, and the reference results."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import TopicPartition
from support.groups import fast_group

from kstream.broker_compat.reader import caught_up
from kstream.kafka.admin import Admin
from kstream.kafka.consumer import Consumer
from kstream.kafka.partitioner import default_partition
from kstream.kafka.producer import Producer
from kstream.records import Record
from kstream.runtime import App, AppState
from kstream.serde import serde
from kstream.state import provenance
from kstream.testing import TopologyTestDriver
from kstream.topology.topology import Topology

Rec = tuple[Any, Any, int]


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    with Admin(bootstrap) as admin:
        for name, parts in topics.items():
            admin.create_topic(name, parts)


def produce(
    bootstrap: str, topic: str, records: Iterable[Rec], key_serde: Any, value_serde: Any
) -> None:
    ks, vs = serde(key_serde), serde(value_serde)
    with Producer(bootstrap) as p:
        for k, v, ts in records:
            p.produce(topic, vs.to_bytes(v), ks.to_bytes(k), timestamp=ts)
        p.flush()


def produce_raw(
    bootstrap: str, topic: str, records: Iterable[tuple[bytes, bytes, int, Sequence[Any]]]
) -> None:
    """Records given as bytes: (key, value, timestamp, headers)."""
    with Producer(bootstrap) as p:
        for k, v, ts, headers in records:
            p.produce(topic, v, k, timestamp=ts, headers=list(headers))
        p.flush()


def read_back(
    bootstrap: str, topic: str, key_serde: Any, value_serde: Any
) -> list[tuple[Any, Any, int, list[tuple[str, bytes | None]]]]:
    """`read_all` as (key, value, timestamp, headers), the headers less the provenance id the
    Spark sink stamps on every record (so that they compare with the native engine's)."""
    return [
        (r.key, r.value, r.timestamp, [h for h in r.headers or () if h[0] != provenance.HEADER])
        for r in read_all(bootstrap, topic, key_serde, value_serde)
    ]


def read_all(
    bootstrap: str, topic: str, key_serde: Any, value_serde: Any, *, keep_repeats: bool = False
) -> list[Record]:
    """Every record of `topic` up to its end, minus repeats of a provenance id already seen
    (`keep_repeats`: everything a read_committed reader is shown)."""
    ks, vs = serde(key_serde), serde(value_serde)
    out: list[Record] = []
    seen: set[tuple[str, int, int, int]] = set()
    with Consumer(bootstrap) as c:
        parts = c.partitions_for(topic)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        done: set[int] = set()
        deadline = time.monotonic() + 30
        while len(done) < len(parts) and time.monotonic() < deadline:
            for m in c.consume_batch(5000, 0.5):
                prov = provenance.from_headers(m.headers())
                if prov is not None and not keep_repeats:
                    if tuple(prov) in seen:
                        continue
                    seen.add(tuple(prov))
                out.append(
                    Record(
                        ks.from_bytes(m.key()),
                        vs.from_bytes(m.value()),
                        m.timestamp()[1],
                        m.headers() or (),
                        m.topic(),
                        m.partition(),
                        m.offset(),
                    )
                )
            done = {p for p in parts if c.eof_offset(topic, p) is not None}
    return out


def final_values(records: Sequence[Record]) -> dict[Any, Any]:
    """The table a stream of updates ends at (None deletes)."""
    return final_table((r.key, r.value) for r in records)


def final_table(pairs: Iterable[tuple[Any, Any]]) -> dict[Any, Any]:
    """`final_values` for `(key, value)` pairs, e.g. what a test driver wrote."""
    table: dict[Any, Any] = {}
    for k, v in pairs:
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
    return table


def driver_outputs(
    topology: Topology,
    inputs: dict[str, tuple[Any, Any, Sequence[Rec]]],
    outputs: dict[str, tuple[Any, Any]],
) -> dict[str, list[tuple[Any, Any]]]:
    """What the test driver writes to each output topic for the same input."""
    with TopologyTestDriver(topology, app_id="ref", initial_wall_clock=0) as d:
        for topic, (ks, vs, recs) in inputs.items():
            t = d.input_topic(topic, key_serde=ks, value_serde=vs)
            for k, v, ts in recs:
                t.pipe(k, v, timestamp=ts)
        return {
            topic: d.output_topic(topic, key_serde=ks, value_serde=vs).read_key_values()
            for topic, (ks, vs) in outputs.items()
        }


def driver_in_time_order(
    topology: Topology,
    inputs: dict[str, tuple[Any, Any, Sequence[Rec]]],
    outputs: dict[str, tuple[Any, Any]],
) -> dict[str, list[tuple[Any, Any]]]:
    """Like `driver_outputs` for single-partition topics read together, in Kafka Streams' order.

    Each topic keeps its own order; the next record piped is the head with the smallest
    timestamp (ties: the topic whose name sorts first), as a task picks among its partitions.
    """
    with TopologyTestDriver(topology, app_id="ref", initial_wall_clock=0) as d:
        heads: list[tuple[int, str, int]] = []
        topics = {}
        for topic, (ks, vs, recs) in inputs.items():
            topics[topic] = (d.input_topic(topic, key_serde=ks, value_serde=vs), list(recs))
            if recs:
                heads.append((recs[0][2], topic, 0))
        heapq.heapify(heads)
        while heads:
            _ts, topic, i = heapq.heappop(heads)
            t, recs = topics[topic]
            k, v, ts = recs[i]
            t.pipe(k, v, timestamp=ts)
            if i + 1 < len(recs):
                heapq.heappush(heads, (recs[i + 1][2], topic, i + 1))
        return {
            topic: d.output_topic(topic, key_serde=ks, value_serde=vs).read_key_values()
            for topic, (ks, vs) in outputs.items()
        }


def per_partition_driver(
    topology: Callable[[], Topology],
    topic: str,
    key_serde: Any,
    value_serde: Any,
    records: Sequence[Rec],
    partitions: int,
    outputs: dict[str, tuple[Any, Any]],
) -> dict[str, list[tuple[Any, Any]]]:
    """The driver's results for a topology with no repartition, one driver per partition.

    Stream time is kept per task, i.e. per partition, as in Kafka Streams: each partition's
    records go through a driver of their own, placed by the key's default partition.
    """
    ks = serde(key_serde)
    split: dict[int, list[Rec]] = {}
    for k, v, ts in records:
        split.setdefault(default_partition(ks.to_bytes(k) or b"", partitions), []).append(
            (k, v, ts)
        )
    out: dict[str, list[tuple[Any, Any]]] = {t: [] for t in outputs}
    for part in sorted(split):
        got = driver_outputs(topology(), {topic: (key_serde, value_serde, split[part])}, outputs)
        for t, pairs in got.items():
            out[t].extend(pairs)
    return out


# --- the native runtime on the same input --------------------------------------------------


def start_native(topology: Topology, app_id: str, bootstrap: str, state_dir: str) -> App:
    """Start `topology` on the native runtime (exactly-once) in this process."""
    app = App(topology, app_id, bootstrap, "exactly_once", fast_group({"state_dir": state_dir}))
    app.start()
    return app


def finish_native(app: App, bootstrap: str, deadline_s: float = 120.0) -> None:
    """Wait until `app` has processed every record of its source topics, then close it.

    Done = the app's committed offsets leave no record unread on any partition of its source
    topics, checked upstream first (a repartition topic only after the topics that feed it).
    """
    from kstream.spark.tasks import build_task_plan

    plan = build_task_plan(app.topology, app.app_id)
    plan.unfuse(set(plan.fused.values()))  # the native runtime runs every sub-topology
    topics = [t for sid in plan.order for t in plan.sources[sid]]
    end = time.monotonic() + deadline_s
    try:
        while not all(caught_up(bootstrap, app.app_id, t) for t in topics):
            if app.state == AppState.ERROR:
                raise AssertionError(f"the native app failed: {app.error!r}")
            assert time.monotonic() < end, f"the native app did not finish in {deadline_s:g}s"
            time.sleep(0.1)
    finally:
        app.close()
    if app.error is not None:
        raise AssertionError(f"the native app failed: {app.error!r}")
