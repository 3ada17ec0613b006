"""Session windowed aggregations, ported from Kafka Streams' own cases.

Sources: `KStreamSessionWindowAggregateProcessorTest` (streams/src/test/.../kstream/internals),
whose store keeps sessions for 3 gaps (as here), and the developer guide's session example
(docs/streams/developer-guide/dsl-api.html, "Session Windows"). Kafka's cache-disabled results
are used: every update is forwarded, and a merge first deletes every merged session
(`(session, None)`), then forwards the merged one, stamped with its end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.dsl.windows import SessionWindows
from kstream.records import Windowed
from kstream.testing.driver import TopologyTestDriver

W = Windowed
S = SessionWindows
Out = list[tuple[Any, Any, int]]
Events = list[tuple[str, str, int]]
GAP = 5 * 60 * 1000
MINUTE = 60_000


def run(events: Events, build: Callable[[Any], Any]) -> tuple[Out, dict[str, int]]:
    """Pipe (key, value, ts) events; the emitted (key, value, ts) and dropped-record counts."""
    b = StreamBuilder()
    build(b.stream("in", "string", "string").group_by_key()).to_stream().to("out", "auto", "auto")
    with TopologyTestDriver(b) as d:
        d.input_topic("in", "string", "string").pipe_many(events)
        records = d.output_topic("out", "auto", "auto").read_records()
        return [(r.key, r.value, r.timestamp) for r in records], d.dropped_records()


CASES = [
    pytest.param(
        [
            ("a", "1", 0),
            ("b", "1", 0),
            ("c", "1", 0),
            ("d", "1", 0),
            ("d", "2", GAP // 2),
            ("a", "2", GAP + 1),
            ("b", "2", GAP + 1),
            ("a", "3", GAP + 1 + GAP // 2),
            ("c", "3", GAP + 1 + GAP // 2),
        ],
        S.with_gap(GAP),
        "update",
        [
            (W("a", 0, 0), 1, 0),
            (W("b", 0, 0), 1, 0),
            (W("c", 0, 0), 1, 0),
            (W("d", 0, 0), 1, 0),
            (W("d", 0, 0), None, 0),
            (W("d", 0, GAP // 2), 2, GAP // 2),
            (W("a", GAP + 1, GAP + 1), 1, GAP + 1),
            (W("b", GAP + 1, GAP + 1), 1, GAP + 1),
            (W("a", GAP + 1, GAP + 1), None, GAP + 1),
            (W("a", GAP + 1, GAP + 1 + GAP // 2), 2, GAP + 1 + GAP // 2),
            (W("c", GAP + 1 + GAP // 2, GAP + 1 + GAP // 2), 1, GAP + 1 + GAP // 2),
        ],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldHandleMultipleSessionsAndMerging[update]",
    ),
    pytest.param(
        [
            ("a", "1", 0),
            ("b", "1", 0),
            ("c", "1", 0),
            ("d", "1", 0),
            ("d", "2", GAP // 2),
            ("a", "2", GAP + 1),
            ("b", "2", GAP + 1),
            ("a", "3", GAP + 1 + GAP // 2),
            ("c", "3", GAP + 1 + GAP // 2),
        ],
        S.with_gap(GAP),
        "final",
        [
            (W("a", 0, 0), 1, 0),
            (W("b", 0, 0), 1, 0),
            (W("c", 0, 0), 1, 0),
            (W("d", 0, GAP // 2), 2, GAP // 2),
        ],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldHandleMultipleSessionsAndMerging[final]",
    ),
    pytest.param(
        [
            ("mel", "first", 0),
            ("mel", "second", GAP + 1),
            ("mel", "second", GAP + 1),
            ("mel", "third", 2 * GAP + 2),
            ("mel", "third", 2 * GAP + 2),
            ("mel", "third", 2 * GAP + 2),
        ],
        S.with_gap(GAP),
        "update",
        [
            (W("mel", 0, 0), 1, 0),
            (W("mel", GAP + 1, GAP + 1), 1, GAP + 1),
            (W("mel", GAP + 1, GAP + 1), 2, GAP + 1),
            (W("mel", 2 * GAP + 2, 2 * GAP + 2), 1, 2 * GAP + 2),
            (W("mel", 2 * GAP + 2, 2 * GAP + 2), 2, 2 * GAP + 2),
            (W("mel", 2 * GAP + 2, 2 * GAP + 2), 3, 2 * GAP + 2),
        ],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldHaveMultipleSessionsForSameIdWhenTimestampApartBySessionGap[update]",
    ),
    pytest.param(
        [
            ("mel", "first", 0),
            ("mel", "second", GAP + 1),
            ("mel", "second", GAP + 1),
            ("mel", "third", 2 * GAP + 2),
            ("mel", "third", 2 * GAP + 2),
            ("mel", "third", 2 * GAP + 2),
        ],
        S.with_gap(GAP),
        "final",
        [
            (W("mel", 0, 0), 1, 0),
            (W("mel", GAP + 1, GAP + 1), 2, GAP + 1),
        ],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldHaveMultipleSessionsForSameIdWhenTimestampApartBySessionGap[final]",
    ),
    pytest.param(
        [("mel", "first", 0), ("mel", "second", GAP + 1), ("mel", "third", GAP // 2)],
        S.with_gap(GAP),
        "update",
        [
            (W("mel", 0, 0), 1, 0),
            (W("mel", GAP + 1, GAP + 1), 1, GAP + 1),
            (W("mel", 0, 0), None, 0),
            (W("mel", GAP + 1, GAP + 1), None, GAP + 1),
            (W("mel", 0, GAP + 1), 3, GAP + 1),
        ],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldMergeSessions[update]",
    ),
    pytest.param(
        [("mel", "first", 0), ("mel", "second", GAP + 1), ("mel", "third", GAP // 2)],
        S.with_gap(GAP),
        "final",
        [
            (W("mel", 0, 0), 1, 0),
        ],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldMergeSessions[final]",
    ),
    pytest.param(
        [("mel", "first", 0), ("mel", "second", 0)],
        S.with_gap(GAP),
        "update",
        [
            (W("mel", 0, 0), 1, 0),
            (W("mel", 0, 0), 2, 0),
        ],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldUpdateSessionIfTheSameTime[update]",
    ),
    pytest.param(
        [("mel", "first", 0), ("mel", "second", 0)],
        S.with_gap(GAP),
        "final",
        [],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldUpdateSessionIfTheSameTime[final]",
    ),
    pytest.param(
        [("a", "1", 0), ("a", "1", 5)],
        S.with_gap(GAP),
        "update",
        [
            (W("a", 0, 0), 1, 0),
            (W("a", 0, 0), None, 0),
            (W("a", 0, 5), 2, 5),
        ],
        {},
        id="KStreamSessionWindowAggregateProcessorTest.shouldImmediatelyForwardRemovedSessionsWhenMerging[update]",
    ),
    pytest.param(
        [("dummy", "d", 0), ("OnTime1", "1", 0), ("dummy", "d", 11), ("Late1", "1", 0)],
        S.with_gap(10),
        "update",
        [
            (W("dummy", 0, 0), 1, 0),
            (W("OnTime1", 0, 0), 1, 0),
            (W("dummy", 11, 11), 1, 11),
        ],
        {"late_record": 1},
        id="KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingLateRecordWithZeroGrace[update]",
    ),
    pytest.param(
        [("dummy", "d", 0), ("OnTime1", "1", 0), ("dummy", "d", 11), ("Late1", "1", 0)],
        S.with_gap(10),
        "final",
        [
            (W("OnTime1", 0, 0), 1, 0),
            (W("dummy", 0, 0), 1, 0),
        ],
        {"late_record": 1},
        id="KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingLateRecordWithZeroGrace[final]",
    ),
    pytest.param(
        [
            ("dummy", "d", 0),
            ("OnTime1", "1", 0),
            ("dummy", "d", 11),
            ("OnTime2", "1", 0),
            ("dummy", "d", 12),
            ("Late1", "1", 0),
        ],
        S.with_gap(10, grace=1),
        "update",
        [
            (W("dummy", 0, 0), 1, 0),
            (W("OnTime1", 0, 0), 1, 0),
            (W("dummy", 11, 11), 1, 11),
            (W("OnTime2", 0, 0), 1, 0),
            (W("dummy", 11, 11), None, 11),
            (W("dummy", 11, 12), 2, 12),
        ],
        {"late_record": 1},
        id="KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace[update]",
    ),
    pytest.param(
        [
            ("dummy", "d", 0),
            ("OnTime1", "1", 0),
            ("dummy", "d", 11),
            ("OnTime2", "1", 0),
            ("dummy", "d", 12),
            ("Late1", "1", 0),
        ],
        S.with_gap(10, grace=1),
        "final",
        [
            (W("OnTime1", 0, 0), 1, 0),
            (W("OnTime2", 0, 0), 1, 0),
            (W("dummy", 0, 0), 1, 0),
        ],
        {"late_record": 1},
        id="KStreamSessionWindowAggregateProcessorTest.shouldLogAndMeterWhenSkippingLateRecordWithNonzeroGrace[final]",
    ),
]


@pytest.mark.parametrize(("events", "windows", "emit", "expected", "dropped"), CASES)
def test_kafka_session_processor_case(
    events: Events, windows: SessionWindows, emit: str, expected: Out, dropped: dict[str, int]
) -> None:
    store = stores.session("sessions", retention=3 * GAP)
    out, drops = run(events, lambda g: g.windowed_by(windows).count(store=store, emit=emit))
    assert out == expected
    assert drops == dropped


# green@0, blue@2, green@6, then the out-of-order green@4 and blue@5, then blue@11 (minutes)
GUIDE_EVENTS = [
    ("green", "x", 0), ("blue", "x", 2 * MINUTE), ("green", "x", 6 * MINUTE),
    ("green", "x", 4 * MINUTE), ("blue", "x", 5 * MINUTE), ("blue", "x", 11 * MINUTE),
]  # fmt: skip


def test_developer_guide_session_example() -> None:
    """Developer guide, "Session Windows" (gap 5 minutes, no grace), with a store that keeps
    the sessions of the whole example: green@4 merges green's two sessions into [0, 6] (3
    records), blue@5 arriving at stream time 6 extends blue's session to [2, 5] (2 records),
    blue@11 starts a new session."""
    store = stores.session("sessions", retention=60 * MINUTE)
    out, dropped = run(
        GUIDE_EVENTS, lambda g: g.windowed_by(S.with_gap(5 * MINUTE)).count(store=store)
    )
    assert out == [
        (W("green", 0, 0), 1, 0),
        (W("blue", 2 * MINUTE, 2 * MINUTE), 1, 2 * MINUTE),
        (W("green", 6 * MINUTE, 6 * MINUTE), 1, 6 * MINUTE),
        (W("green", 0, 0), None, 0),
        (W("green", 6 * MINUTE, 6 * MINUTE), None, 6 * MINUTE),
        (W("green", 0, 6 * MINUTE), 3, 6 * MINUTE),
        (W("blue", 2 * MINUTE, 2 * MINUTE), None, 2 * MINUTE),
        (W("blue", 2 * MINUTE, 5 * MINUTE), 2, 5 * MINUTE),
        (W("blue", 11 * MINUTE, 11 * MINUTE), 1, 11 * MINUTE),
    ]
    assert dropped == {}


def test_developer_guide_session_example_with_default_retention() -> None:
    """The same example with Kafka's default session store retention (gap + grace = 5
    minutes): at stream time 6 the store no longer returns green's [0, 0] session (Kafka's
    stores hide sessions ending `retention` or more before the newest), so green@4 only merges
    with [6, 6]. Blue's session is extended as in the guide."""
    out, dropped = run(GUIDE_EVENTS, lambda g: g.windowed_by(S.with_gap(5 * MINUTE)).count())
    assert out == [
        (W("green", 0, 0), 1, 0),
        (W("blue", 2 * MINUTE, 2 * MINUTE), 1, 2 * MINUTE),
        (W("green", 6 * MINUTE, 6 * MINUTE), 1, 6 * MINUTE),
        (W("green", 6 * MINUTE, 6 * MINUTE), None, 6 * MINUTE),
        (W("green", 4 * MINUTE, 6 * MINUTE), 2, 6 * MINUTE),
        (W("blue", 2 * MINUTE, 2 * MINUTE), None, 2 * MINUTE),
        (W("blue", 2 * MINUTE, 5 * MINUTE), 2, 5 * MINUTE),
        (W("blue", 11 * MINUTE, 11 * MINUTE), 1, 11 * MINUTE),
    ]
    assert dropped == {}


def test_aggregate_starts_from_the_initializer_and_merges_even_a_single_session() -> None:
    """KStreamSessionWindowAggregate.process: the aggregate starts at initializer(), each found
    session is merged into it with merger(key, agg, session_agg), then the record is added, so
    a non-neutral initializer shows in every merge ("0|0+1+2")."""
    out, _ = run(
        [("k", "1", 0), ("k", "2", 5), ("k", "3", 30), ("k", "4", 20)],
        lambda g: g.windowed_by(S.with_gap(10)).aggregate(
            lambda: "0", lambda _k, v, agg: f"{agg}+{v}", lambda _k, a, b: f"{a}|{b}"
        ),
    )
    assert out == [
        (W("k", 0, 0), "0+1", 0),
        (W("k", 0, 0), None, 0),
        (W("k", 0, 5), "0|0+1+2", 5),
        (W("k", 30, 30), "0+3", 30),
        (W("k", 30, 30), None, 30),
        (W("k", 20, 30), "0|0+3+4", 30),
    ]


def test_record_inside_a_session_deletes_and_rewrites_it() -> None:
    """KStreamSessionWindowAggregate.process: a record inside an existing session gives a
    merged window different from its own [t, t], so the session is removed (a delete is
    forwarded) and put back with the new aggregate. A record bridging two sessions merges
    both, oldest first (the grace keeps [0, 10] in the store when e@20 arrives)."""
    out, _ = run(
        [("k", "a", 0), ("k", "b", 10), ("k", "c", 5), ("k", "d", 30), ("k", "e", 20)],
        lambda g: g.windowed_by(S.with_gap(10, grace=20)).reduce(lambda a, b: a + b),
    )
    assert out == [
        (W("k", 0, 0), "a", 0),
        (W("k", 0, 0), None, 0),
        (W("k", 0, 10), "ab", 10),
        (W("k", 0, 10), None, 10),
        (W("k", 0, 10), "abc", 10),
        (W("k", 30, 30), "d", 30),
        (W("k", 0, 10), None, 10),
        (W("k", 30, 30), None, 30),
        (W("k", 0, 30), "abcde", 30),
    ]


def test_late_is_decided_by_the_end_of_the_session_a_record_merges_into() -> None:
    """KStreamSessionWindowAggregate.process: windowCloseTime = stream time - gap - grace,
    compared with the end of the merged session. At stream time 30 (gap 10, grace 5) the
    close time is 15: y@14 alone is late, y@15 is not; k@12 and then k@3 merge into k's
    session ending at 20 and are kept, however old; z@1 alone is late."""
    out, dropped = run(
        [
            ("k", "a", 20),
            ("x", "b", 30),
            ("y", "c", 14),
            ("y", "d", 15),
            ("k", "e", 12),
            ("k", "f", 3),
            ("z", "g", 1),
        ],
        lambda g: g.windowed_by(S.with_gap(10, grace=5)).reduce(lambda a, b: a + b),
    )
    assert out == [
        (W("k", 20, 20), "a", 20),
        (W("x", 30, 30), "b", 30),
        (W("y", 15, 15), "d", 15),
        (W("k", 20, 20), None, 20),
        (W("k", 12, 20), "ae", 20),
        (W("k", 12, 20), None, 20),
        (W("k", 3, 20), "aef", 20),
    ]
    assert dropped == {"late_record": 2}
