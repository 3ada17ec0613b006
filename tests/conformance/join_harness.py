"""Shared pieces of the join conformance tests ported from Kafka Streams' own tests.

Kafka's join tests pipe records into `topic1` (left) and `topic2` (right) with Integer keys
and check `(key, value, timestamp)` in order after each group of records; a case here is the
same: a list of steps, each a list of input records and the exact output expected after them.
`kafka_joiner` renders values as Kafka's `MockValueJoiner.TOSTRING_JOINER` does ("A0+null").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kstream.dsl import StreamBuilder
from kstream.dsl.windows import JoinWindows
from kstream.testing.driver import TopologyTestDriver

KEYS = (0, 1, 2, 3)
LEFT, RIGHT, OUTPUT = "topic1", "topic2", "output"

Event = tuple[str, Any, Any, int]
Expected = tuple[Any, Any, int]
Step = tuple[list[Event], list[Expected]]


def kafka_joiner(left: Any, right: Any) -> str:
    """`MockValueJoiner.TOSTRING_JOINER`: `left + "+" + right`, None written as "null"."""
    return f"{'null' if left is None else left}+{'null' if right is None else right}"


def each(
    topic: str,
    prefix: str,
    ts: int,
    keys: Iterable[int] = KEYS,
    *,
    stagger: bool = False,
    numeric: int | None = None,
) -> list[Event]:
    """One record per key, as Kafka's `for (key : expectedKeys) pipeInput(key, prefix + key)`.

    `stagger` gives the i-th record `ts + i`; `numeric` makes the value `key + numeric` (the
    Long values of Kafka's outer-join tests) instead of `prefix + key`.
    """
    out: list[Event] = []
    for i, k in enumerate(keys):
        value: Any = f"{prefix}{k}" if numeric is None else k + numeric
        out.append((topic, k, value, ts + i if stagger else ts))
    return out


def left(key: Any, value: Any, ts: int) -> list[Event]:
    return [(LEFT, key, value, ts)]


def right(key: Any, value: Any, ts: int) -> list[Event]:
    return [(RIGHT, key, value, ts)]


def stream_stream(kind: str, window: JoinWindows, *, right_values: str = "string") -> StreamBuilder:
    """`topic1.<kind>Join(topic2, TOSTRING_JOINER, window)` written to `output`."""
    b = StreamBuilder()
    s1 = b.stream(LEFT, "long", "string")
    s2 = b.stream(RIGHT, "long", right_values)
    method = "join" if kind == "inner" else f"{kind}_join"
    getattr(s1, method)(s2, kafka_joiner, window=window).to(OUTPUT, "long", "string")
    return b


def run_steps(
    builder: StreamBuilder,
    steps: Sequence[Step],
    serdes: dict[str, tuple[str, str]] | None = None,
    output_serdes: tuple[str, str] = ("long", "string"),
) -> dict[str, int]:
    """Pipe each step's records, assert the exact output after each step; return the drops."""
    serdes = serdes or {LEFT: ("long", "string"), RIGHT: ("long", "string")}
    with TopologyTestDriver(builder) as d:
        topics = {t: d.input_topic(t, *kv) for t, kv in serdes.items()}
        out = d.output_topic(OUTPUT, *output_serdes)
        for i, (events, expected) in enumerate(steps):
            for topic, key, value, ts in events:
                topics[topic].pipe(key, value, timestamp=ts)
            got = [(r.key, r.value, r.timestamp) for r in out.read_records()]
            assert got == expected, f"step {i}: {events}"
        return d.dropped_records()
