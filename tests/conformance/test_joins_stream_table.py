"""Stream-table and stream-global-table joins against Kafka Streams' own tests.

Ports of Kafka's `KStreamKTableJoinTest`, `KStreamKTableLeftJoinTest`,
`KStreamGlobalKTableJoinTest` and `KStreamGlobalKTableLeftJoinTest` (named in each id):
same inputs in the same order, same `(key, value, timestamp)` outputs in order. A result
carries the stream record's timestamp; table updates alone never emit.
"""

from __future__ import annotations

from typing import Any

import pytest
from join_harness import (
    INTEGRATION_INPUT,
    INTEGRATION_LEFT,
    INTEGRATION_RIGHT,
    KEYS,
    OUTPUT,
    Event,
    Expected,
    Step,
    integration_joiner,
    kafka_joiner,
    run_integration,
    run_steps,
)

from kstream.dsl import StreamBuilder

STREAM, TABLE, GLOBAL = "streamTopic", "tableTopic", "globalTableTopic"


# --- KStream-KTable ---------------------------------------------------------------------------


def stream_table(kind: str) -> StreamBuilder:
    b = StreamBuilder()
    stream = b.stream(STREAM, "long", "string")
    table = b.table(TABLE, "long", "string")
    join = stream.join if kind == "inner" else stream.left_join
    join(table, kafka_joiner).to(OUTPUT, "long", "string")
    return b


TABLE_SERDES = {STREAM: ("long", "string"), TABLE: ("long", "string")}


def to_stream(count: int, prefix: str) -> list[Event]:
    """Kafka's `pushToStream`: key i with `prefix + i` at timestamp i."""
    return [(STREAM, k, f"{prefix}{k}", i) for i, k in enumerate(KEYS[:count])]


def to_table(count: int, prefix: str) -> list[Event]:
    """Kafka's `pushToTable` (its timestamps are random there: they play no part)."""
    return [(TABLE, k, f"{prefix}{k}", 7919 * (i + 1)) for i, k in enumerate(KEYS[:count])]


def table_deletes(count: int) -> list[Event]:
    return [(TABLE, k, None, 0) for k in KEYS[:count]]


def results(prefix: str, table_prefix: str | None, keys: tuple[int, ...]) -> list[Expected]:
    """`prefix<k>+<table value>` at timestamp k ("null" when `table_prefix` is None)."""
    tv = "null" if table_prefix is None else table_prefix
    return [(k, f"{prefix}{k}+{tv}{'' if table_prefix is None else k}", k) for k in keys]


INNER_TABLE_CASES = [
    pytest.param(
        [(to_stream(2, "X"), [])],
        id="KStreamKTableJoinTest.shouldNotJoinWithEmptyTableOnStreamUpdates",
    ),
    pytest.param(
        [
            (to_stream(2, "X"), []),
            (to_table(2, "Y"), []),
            (to_stream(4, "X"), results("X", "Y", (0, 1))),
            (to_table(4, "YY"), []),
            (to_stream(4, "X"), results("X", "YY", KEYS)),
            (to_table(4, "YYY"), []),
        ],
        id="KStreamKTableJoinTest.shouldNotJoinOnTableUpdates",
    ),
    pytest.param(
        [(to_table(2, "Y"), []), (to_stream(4, "X"), results("X", "Y", (0, 1)))],
        id="KStreamKTableJoinTest.shouldJoinOnlyIfMatchFoundOnStreamUpdates",
    ),
    pytest.param(
        [
            (to_table(4, "Y"), []),
            (to_stream(4, "X"), results("X", "Y", KEYS)),
            (table_deletes(2), []),
            (to_stream(4, "XX"), results("XX", "Y", (2, 3))),
        ],
        id="KStreamKTableJoinTest.shouldClearTableEntryOnNullValueUpdates",
    ),
]


@pytest.mark.parametrize("steps", INNER_TABLE_CASES)
def test_stream_table_inner_join(steps: list[Step]) -> None:
    assert run_steps(stream_table("inner"), steps, TABLE_SERDES) == {}


LEFT_TABLE_CASES = [
    pytest.param(
        [(to_stream(2, "X"), results("X", None, (0, 1)))],
        id="KStreamKTableLeftJoinTest.shouldJoinWithEmptyTableOnStreamUpdates",
    ),
    pytest.param(
        [
            (to_stream(2, "X"), results("X", None, (0, 1))),
            (to_table(2, "Y"), []),
            (to_stream(4, "X"), results("X", "Y", (0, 1)) + results("X", None, (2, 3))),
            (to_table(4, "YY"), []),
            (to_stream(4, "X"), results("X", "YY", KEYS)),
            (to_table(4, "YYY"), []),
        ],
        id="KStreamKTableLeftJoinTest.shouldNotJoinOnTableUpdates",
    ),
    pytest.param(
        [
            (to_table(2, "Y"), []),
            (to_stream(4, "X"), results("X", "Y", (0, 1)) + results("X", None, (2, 3))),
        ],
        id="KStreamKTableLeftJoinTest.shouldJoinRegardlessIfMatchFoundOnStreamUpdates",
    ),
    pytest.param(
        [
            (to_table(4, "Y"), []),
            (to_stream(4, "X"), results("X", "Y", KEYS)),
            (table_deletes(2), []),
            (to_stream(4, "XX"), results("XX", None, (0, 1)) + results("XX", "Y", (2, 3))),
        ],
        id="KStreamKTableLeftJoinTest.shouldClearTableEntryOnNullValueUpdates",
    ),
]


@pytest.mark.parametrize("steps", LEFT_TABLE_CASES)
def test_stream_table_left_join(steps: list[Step]) -> None:
    assert run_steps(stream_table("left"), steps, TABLE_SERDES) == {}


@pytest.mark.parametrize(
    ("kind", "expected", "dropped"),
    [
        pytest.param("inner", [], {"null_key": 1}, id="inner: dropped and metered"),
        pytest.param("left", [(None, "A+null", 0)], {}, id="left: joined with null (KIP-962)"),
    ],
)
def test_stream_table_null_key(
    kind: str, expected: list[Expected], dropped: dict[str, int]
) -> None:
    """KStreamKTableJoinTest.shouldLogAndMeterWhenSkippingNullLeftKey; the left join forwards
    it since Kafka 3.7 (KIP-962, `RelaxedNullKeyRequirementJoinTest`)."""
    steps: list[Step] = [([(TABLE, 0, "Y0", 0), (STREAM, None, "A", 0)], expected)]
    assert run_steps(stream_table(kind), steps, TABLE_SERDES) == dropped


@pytest.mark.parametrize("kind", ["inner", "left"])
def test_stream_table_null_value_is_dropped(kind: str) -> None:
    """KStreamKTableJoinTest.shouldLogAndMeterWhenSkippingNullLeftValue (left joins too)."""
    steps: list[Step] = [([(TABLE, 1, "Y1", 0), (STREAM, 1, None, 0)], [])]
    assert run_steps(stream_table(kind), steps, TABLE_SERDES) == {"null_value": 1}


# --- KStream-GlobalKTable: the table key is the second comma-separated token of the value ----


def foreign_key(_key: Any, value: str) -> str | None:
    tokens = value.split(",")
    return tokens[1] if len(tokens) > 1 else None


def stream_global(kind: str) -> StreamBuilder:
    b = StreamBuilder()
    stream = b.stream(STREAM, "long", "string")
    table = b.global_table(GLOBAL, "string", "string")
    join = stream.join if kind == "inner" else stream.left_join
    join(table, foreign_key, kafka_joiner).to(OUTPUT, "long", "string")
    return b


GLOBAL_SERDES = {STREAM: ("long", "string"), GLOBAL: ("string", "string")}


class StreamClock:
    """Kafka's global-join tests pipe stream records 1 ms apart from 0 (auto-advance)."""

    def __init__(self) -> None:
        self.now = 0

    def push(
        self, count: int, prefix: str, *, foreign: bool = True, null_first_key: bool = False
    ) -> list[Event]:
        out: list[Event] = []
        for i, k in enumerate(KEYS[:count]):
            value = f"{prefix}{k}" + (f",FKey{k}" if foreign else "")
            key = None if null_first_key and i == 0 else k
            out.append((STREAM, key, value, self.now))
            self.now += 1
        return out


def to_global(count: int, prefix: str | None) -> list[Event]:
    return [
        (GLOBAL, f"FKey{k}", None if prefix is None else f"{prefix}{k}", 0) for k in KEYS[:count]
    ]


def fk_results(
    prefix: str, table_prefix: str | None, keys: tuple[int, ...], first_ts: int
) -> list[Expected]:
    """`prefix<k>,FKey<k>+<table value>`, timestamps counting up from `first_ts`."""
    out: list[Expected] = []
    for i, k in enumerate(keys):
        tv = "null" if table_prefix is None else f"{table_prefix}{k}"
        out.append((k, f"{prefix}{k},FKey{k}+{tv}", first_ts + i))
    return out


def global_cases(kind: str) -> list[Any]:
    left = kind == "left"
    test = "KStreamGlobalKTableLeftJoinTest" if left else "KStreamGlobalKTableJoinTest"
    cases = []

    c = StreamClock()
    expected = fk_results("X", None, (0, 1), 0) if left else []
    cases.append(
        pytest.param(
            [(c.push(2, "X"), expected)], {}, id=f"{test}.shouldNotJoinWithEmptyGlobalTable"
        )
    )

    c = StreamClock()
    steps: list[Step] = [(c.push(2, "X"), fk_results("X", None, (0, 1), 0) if left else [])]
    steps.append((to_global(2, "Y"), []))
    joined = fk_results("X", "Y", (0, 1), 2)
    steps.append((c.push(4, "X"), joined + fk_results("X", None, (2, 3), 4) if left else joined))
    steps.append((to_global(4, "YY"), []))
    steps.append((c.push(4, "X"), fk_results("X", "YY", KEYS, 6)))
    steps.append((to_global(4, "YYY"), []))
    cases.append(pytest.param(steps, {}, id=f"{test}.shouldNotJoinOnGlobalTableUpdates"))

    c = StreamClock()
    joined = fk_results("X", "Y", (0, 1), 0)
    steps = [
        (to_global(2, "Y"), []),
        (c.push(4, "X"), joined + fk_results("X", None, (2, 3), 2) if left else joined),
    ]
    name = "shouldJoinRegardlessIfMatchFound" if left else "shouldJoinOnlyIfMatchFound"
    cases.append(pytest.param(steps, {}, id=f"{test}.{name}OnStreamUpdates"))

    c = StreamClock()
    after_delete = fk_results("XX", "Y", (2, 3), 6)
    steps = [
        (to_global(4, "Y"), []),
        (c.push(4, "X"), fk_results("X", "Y", KEYS, 0)),
        (to_global(2, None), []),
        (
            c.push(4, "XX"),
            fk_results("XX", None, (0, 1), 4) + after_delete if left else after_delete,
        ),
    ]
    cases.append(
        pytest.param(steps, {}, id=f"{test}.shouldClearGlobalTableEntryOnNullValueUpdates")
    )

    c = StreamClock()
    if left:
        # Kafka 4.x: a left join forwards a record whose key mapper gives None, joined to null
        no_fk = [(k, f"XXX{k}+null", k) for k in KEYS]
        steps = [(to_global(4, "Y"), []), (c.push(4, "XXX", foreign=False), no_fk)]
        cases.append(pytest.param(steps, {}, id=f"{test}.shouldJoinOnNullKeyMapperValues"))
    else:
        steps = [(to_global(4, "Y"), []), (c.push(4, "XXX", foreign=False), [])]
        cases.append(
            pytest.param(steps, {"null_key": 4}, id=f"{test}.shouldNotJoinOnNullKeyMapperValues")
        )

    c = StreamClock()
    table_size = 4 if left else 2
    with_null_key = [(None, "X0,FKey0+Y0", 0), (1, "X1,FKey1+Y1", 1)]
    if left:
        with_null_key += fk_results("X", "Y", (2, 3), 2)
    steps = [
        (to_global(table_size, "Y"), []),
        (c.push(4, "X", null_first_key=True), with_null_key),
    ]
    cases.append(
        pytest.param(steps, {}, id=f"{test}.shouldJoinOnNullKeyWithNonNullKeyMapperValues")
    )
    return cases


@pytest.mark.parametrize(("steps", "dropped"), global_cases("inner"))
def test_stream_global_table_inner_join(steps: list[Step], dropped: dict[str, int]) -> None:
    assert run_steps(stream_global("inner"), steps, GLOBAL_SERDES) == dropped


@pytest.mark.parametrize(("steps", "dropped"), global_cases("left"))
def test_stream_global_table_left_join(steps: list[Step], dropped: dict[str, int]) -> None:
    assert run_steps(stream_global("left"), steps, GLOBAL_SERDES) == dropped


def test_global_left_join_of_a_null_key_whose_selector_finds_nothing_joins_null() -> None:
    """KIP-962: a left join keeps a None-key record even when `key_selector` returns None;
    Kafka 4.x keeps a keyed one too (KStreamGlobalKTableLeftJoinTest.
    shouldJoinOnNullKeyMapperValues)."""
    steps: list[Step] = [
        ([(STREAM, None, "X", 5), (STREAM, 7, "Y", 6)], [(None, "X+null", 5), (7, "Y+null", 6)]),
    ]
    assert run_steps(stream_global("left"), steps, GLOBAL_SERDES) == {}


# --- StreamTableJoinIntegrationTest (out-of-order input; caching off) ------------------------

K = 0
STREAM_TABLE_INTEGRATION: dict[str, dict[int, list[Expected]]] = {
    "inner": {4: [(K, "B-a", 5)], 14: [(K, "D-d", 6)], 18: [(K, "E-e", 15)]},
    "left": {
        2: [(K, "A-null", 3)],
        4: [(K, "B-a", 5)],
        8: [(K, "C-null", 9)],
        14: [(K, "D-d", 6)],
        18: [(K, "E-e", 15)],
        21: [(K, "F-null", 4)],
    },
}


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("inner", id="StreamTableJoinIntegrationTest.testInner"),
        pytest.param("left", id="StreamTableJoinIntegrationTest.testLeft"),
    ],
)
def test_stream_table_integration(kind: str) -> None:
    """A stream record meets the table as it is when the record arrives, whatever the
    timestamps (the table is not versioned)."""
    b = StreamBuilder()
    stream = b.stream(INTEGRATION_LEFT, "long", "string")
    table = b.table(INTEGRATION_RIGHT, "long", "string")
    (stream.join if kind == "inner" else stream.left_join)(table, integration_joiner).to(
        "outputTopic", "long", "string"
    )
    by_index = STREAM_TABLE_INTEGRATION[kind]
    expected = [by_index.get(i) for i in range(len(INTEGRATION_INPUT))]
    dropped = run_integration(b, INTEGRATION_INPUT, expected)
    assert dropped == {"null_value": 5}  # the stream's None values; table deletes are not drops
