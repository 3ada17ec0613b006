"""Repeats of records a kstream writer already delivered are processed once, across a restart.

A test of the broker-compatibility component (`broker_compat="tansu"`), on the embedded Tansu
broker in either lane. An upstream kstream app aborts a transaction and writes the same records
again (same provenance ids); Tansu still shows the aborted ones to read_committed readers.
Later the upstream writes some of them a third time (an at-least-once retry). The app counts
every record once, also after a restart on an empty state directory, which restores the
provenance marks from their changelog. (On Apache Kafka the aborted records are never shown,
and an at-least-once upstream's repeats are counted again, as Kafka Streams counts them.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from support.groups import fast_group

from e2e.inprocess import read_until, running
from e2e.support import create_topics
from kstream.broker_compat.reader import TopicReader
from kstream.dsl import StreamBuilder
from kstream.kafka.broker import EmbeddedBroker
from kstream.kafka.producer import Producer
from kstream.runtime import App
from kstream.serde import serde
from kstream.state import provenance

T0 = 1_700_000_000_000


def counting(inp: str, out: str) -> StreamBuilder:
    b = StreamBuilder()
    b.stream(inp, key_serde="string", value_serde="long").group_by_key().count().to_stream().to(
        out, value_serde="long"
    )
    return b


def write(p: Producer, topic: str, ids: range) -> None:
    ks, vs = serde("string"), serde("long")
    for i in ids:
        hdrs = [(provenance.HEADER, provenance.encode("upstream", 0, 100 + i))]
        p.produce(topic, vs.to_bytes(i), ks.to_bytes(f"k{i % 3}"), timestamp=T0 + i, headers=hdrs)


def test_repeats_are_counted_once_also_after_a_restart(
    tansu_broker: EmbeddedBroker, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    bs = tansu_broker.bootstrap_servers
    inp, out = unique_name("upstream-out"), unique_name("counts")
    create_topics(bs, 1, inp, out)
    app_id = unique_name("repeats")
    with Producer(bs, transactional_id=unique_name("upstream")) as p:
        p.begin()
        write(p, inp, range(10))
        p.flush()
        p.abort()
        p.begin()
        write(p, inp, range(20))
        p.commit()

    def app(n: int) -> App:
        return App(
            counting(inp, out).build(),
            app_id,
            bs,
            "exactly_once",
            fast_group({"state_dir": str(tmp_path / f"s{n}"), "broker_compat": "tansu"}),
        )

    with TopicReader(bs, out, "string", "long") as reader:
        with running(app(1)) as a:
            first = read_until(reader, lambda rs: len(rs) >= 20, a)
        with Producer(bs, transactional_id=unique_name("upstream")) as p:
            p.begin()
            write(p, inp, range(15, 25))  # 15..19 a third time, then 20..24 new
            p.commit()
        with running(app(2)) as a:  # a new state directory: the marks come from the changelog
            second = read_until(reader, lambda rs: any(r.value == 9 for r in rs), a)
            second += reader.poll(2.0)

    expected = Counter(f"k{i % 3}" for i in range(20))
    assert [(r.key, r.value) for r in first] == [
        (f"k{i % 3}", Counter(f"k{j % 3}" for j in range(i + 1))[f"k{i % 3}"]) for i in range(20)
    ]
    assert {r.key: r.value for r in first} == dict(expected)
    assert [(r.key, r.value) for r in second] == [
        (f"k{i % 3}", Counter(f"k{j % 3}" for j in range(i + 1))[f"k{i % 3}"])
        for i in range(20, 25)
    ]
