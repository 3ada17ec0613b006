"""Feeding topics, reading them back the way a kstream reader does, and the reference results."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from confluent_kafka import TopicPartition

from kstream.kafka.admin import Admin
from kstream.kafka.consumer import Consumer
from kstream.kafka.producer import Producer
from kstream.records import Record
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
    bootstrap: str, topic: str, records: Iterable[Rec], key_serde: str, value_serde: str
) -> None:
    ks, vs = serde(key_serde), serde(value_serde)
    with Producer(bootstrap) as p:
        for k, v, ts in records:
            p.produce(topic, vs.to_bytes(v), ks.to_bytes(k), timestamp=ts)
        p.flush()


def read_all(bootstrap: str, topic: str, key_serde: str, value_serde: str) -> list[Record]:
    """Every record of `topic` up to its end, minus repeats of a provenance id already seen."""
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
                if prov is not None:
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
    table: dict[Any, Any] = {}
    for r in records:
        if r.value is None:
            table.pop(r.key, None)
        else:
            table[r.key] = r.value
    return table


def driver_outputs(
    topology: Topology,
    inputs: dict[str, tuple[str, str, Sequence[Rec]]],
    outputs: dict[str, tuple[str, str]],
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
