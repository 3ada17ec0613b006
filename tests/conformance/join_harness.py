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


# --- Kafka's AbstractJoinIntegrationTest -------------------------------------------------------
#
# One key (0) for every record, timestamps relative to a base (MockTime's clock; any large
# value); a None value is a delete for tables and is ignored by stream joins. The expected
# results of each integration test list, per input record, what the output topic holds right
# after it (None: nothing).

INTEGRATION_LEFT, INTEGRATION_RIGHT = "inputTopicLeft", "inputTopicRight"
BASE_TS = 1_700_000_000_000
K = 0
L, R = INTEGRATION_LEFT, INTEGRATION_RIGHT

INTEGRATION_INPUT: list[Event] = [
    (L, K, None, 1),
    (R, K, None, 2),
    (L, K, "A", 3),
    (R, K, "a", 4),
    (L, K, "B", 5),
    (R, K, "b", 6),
    (L, K, None, 7),
    (R, K, None, 8),
    (L, K, "C", 9),
    (R, K, "c", 10),
    (R, K, None, 11),
    (L, K, None, 12),
    (R, K, None, 13),
    (R, K, "d", 7),  # out-of-order data with null as latest
    (L, K, "D", 6),
    (L, K, None, 2),
    (R, K, None, 3),
    (R, K, "e", 14),
    (L, K, "E", 15),
    (L, K, None, 10),  # out-of-order data with non-null as latest
    (R, K, None, 9),
    (L, K, "F", 4),
    (R, K, "f", 3),
]

INTEGRATION_INPUT_IN_ORDER: list[Event] = [
    *INTEGRATION_INPUT[:13],
    (R, K, "d", 14),
    (L, K, "D", 15),
    (L, None, "E", 16),
    (R, None, "e", 17),
]

# `leftInput` of the self-join test; its records are piped 1 ms apart from base + 1
SELF_JOIN_INPUT: list[Event] = [
    (L, K, value, i + 1) for i, value in enumerate([None, "A", "B", None, "C", None, "D"])
]


def integration_joiner(left: Any, right: Any) -> str:
    """The integration tests' `(value1, value2) -> value1 + "-" + value2`."""
    return f"{'null' if left is None else left}-{'null' if right is None else right}"


def run_integration(
    builder: StreamBuilder,
    inputs: Sequence[Event],
    expected: Sequence[list[Expected] | None],
) -> dict[str, int]:
    """Kafka's `runTestWithDriver`: after each input, the output holds exactly `expected[i]`."""
    assert len(inputs) == len(expected)
    with TopologyTestDriver(builder) as d:
        topics = {
            t: d.input_topic(t, "long", "string")
            for t in (INTEGRATION_LEFT, INTEGRATION_RIGHT)
            if t in {e[0] for e in inputs}
        }
        out = d.output_topic("outputTopic", "long", "string")
        for i, ((topic, key, value, ts), want) in enumerate(zip(inputs, expected, strict=True)):
            topics[topic].pipe(key, value, timestamp=BASE_TS + ts)
            got = [(r.key, r.value, r.timestamp - BASE_TS) for r in out.read_records()]
            assert got == (want or []), f"input {i}: {(topic, key, value, ts)}"
        return d.dropped_records()
