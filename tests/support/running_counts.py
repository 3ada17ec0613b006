"""A running count per key, every update an output, as the Streams-protocol tests run it: per
key the outputs must be 1, 2, ..., n with nothing missing, repeated or wrong, as a plain
read_committed consumer reads them (tests/integration/test_streams_rebalance_protocol.py,
test_streams_protocol_switch.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from e2e.support import create_topics

from kstream.dsl import StreamBuilder
from kstream.kafka.producer import Producer
from kstream.runtime import App
from kstream.topology.topology import Topology
from support.committed_reader import read_committed
from support.groups import fast_group

KEYS = 20


def topology(inp: str, out: str) -> Topology:
    b = StreamBuilder()
    (
        b.stream(inp, key_serde="string", value_serde="string")
        .group_by_key()
        .count(store="counts")
        .to_stream()
        .to(out, value_serde="long")
    )
    return b.build()


def produce(bs: str, topic: str, first: int, n: int) -> None:
    """Inputs `first` .. `first + n - 1`, over `KEYS` keys in turn."""
    with Producer(bs) as p:
        for i in range(first, first + n):
            p.produce(topic, b"v", f"k{i % KEYS}".encode())
        p.flush()


def counts(bs: str, out: str) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for r in read_committed(bs, out):
        assert r.key is not None and r.value is not None
        seen.setdefault(r.key.decode(), []).append(int.from_bytes(r.value, "big", signed=True))
    return seen


def check_exact(bs: str, out: str, total: int) -> None:
    """Per key 1..n: nothing missing, repeated or wrong."""
    seen = counts(bs, out)
    expected = {f"k{k}": list(range(1, total // KEYS + 1)) for k in range(KEYS)}
    wrong = {k: v for k, v in seen.items() if v != expected.get(k)}
    assert not wrong, f"counts not 1..n for {len(wrong)} keys, e.g. {next(iter(wrong.items()))}"
    assert set(seen) == set(expected)


def fed(bs: str, unique_name: Callable[[str], str]) -> tuple[str, str, str]:
    """(input, output, app id), unique to the test: the topics created with 4 partitions and
    the first 200 inputs written."""
    inp, out, app_id = unique_name("in"), unique_name("out"), unique_name("app")
    create_topics(bs, 4, inp, out)
    produce(bs, inp, 0, 200)
    return inp, out, app_id


def app(bs: str, app_id: str, inp: str, out: str, state: Path, config: Mapping[str, Any]) -> App:
    """The count app under exactly_once_v2, with short group sessions and `config`."""
    cfg = fast_group({"state_dir": str(state), **config})
    return App(topology(inp, out), app_id, bs, "exactly_once_v2", cfg)
