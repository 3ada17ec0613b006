"""Kafka Streams as the oracle: generated topologies must give Kafka Streams' answers.

Each case (tests/oracle/generate.py) is built twice from one spec, by Kafka Streams' DSL in
the harness JVM and by kstream's (tests/oracle/spec.py), and run through each one's
TopologyTestDriver; outputs and store contents must be equal (tests/oracle/compare.py). The
JVM works on a case while kstream runs it.

`make test` runs `KSTREAM_ORACLE_CASES` cases (300) from a fixed seed, the same cases every
run; `make oracle` runs 10,000 from a random seed, and hypothesis shrinks a failing case to a
minimal spec and prints it (with the seed to reproduce it).

`PROCESSOR_API` runs each user processor of the library (stores, stream-time and wall-clock
punctuations, headers) whatever the fixed seed draws. `REGRESSIONS` are the minimal specs of
divergences the oracle found and kstream fixed: they run on every `make test` against the
oracle as well.
"""

from __future__ import annotations

import os
import traceback

import pytest
from hypothesis import HealthCheck, given, settings

from oracle import spec
from oracle.compare import differences
from oracle.generate import cases
from oracle.harness import Oracle
from oracle.spec import Answer, Case

CASES = int(os.environ.get("KSTREAM_ORACLE_CASES", "300"))
RANDOM = os.environ.get("KSTREAM_ORACLE_RANDOM") == "1"


def check(oracle: Oracle, case: Case) -> None:
    """Run `case` on both sides and fail with what differs."""
    oracle.submit(case)
    mine: Answer
    try:
        mine = spec.run(case)
    except Exception:
        mine = {"error": traceback.format_exc()}
    theirs = oracle.answer()
    diff = differences(case, mine, theirs)
    assert not diff, "\n".join(
        ["kstream differs from Kafka Streams:", *diff, "case:", case.pretty()]
    )


@settings(
    max_examples=CASES,
    derandomize=not RANDOM,
    database=None,
    deadline=None,
    print_blob=RANDOM,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def test_generated_topologies_give_kafka_streams_answers(oracle: Oracle, case: Case) -> None:
    check(oracle, case)


def _node(nid: int, op: str, vt: str, *inputs: int, **fields: object) -> dict[str, object]:
    node: dict[str, object] = {"id": nid, "op": op, "vt": vt, **fields}
    if inputs:
        node["in"] = list(inputs)
    return node


def _process(nid: int, vt: str, src: int, processor: str, **fields: object) -> dict[str, object]:
    return _node(nid, "process", vt, src, processor=processor, **fields)


S, L = "string", "long"
REGRESSIONS = [
    pytest.param(
        Case(
            [
                _node(0, "table", L, topic="in0", store="s0", store_kind="kv"),
                _node(1, "filter", L, 0, fn="even"),
                _node(2, "toStream", L, 1),
                _node(3, "to", L, 2, topic="out3"),
            ],
            [["in0", "a", 1, 0], ["in0", "b", None, 1], ["in0", "a", 2, 2], ["in0", "a", 3, 3]],
        ),
        # Kafka's KTableFilter sends no tombstone for an update invisible before and after
        # when the table above is materialized (a named store); kstream sent one
        id="table-filter-below-a-named-store",
    ),
    pytest.param(
        Case(
            [
                _node(0, "stream", L, topic="in0"),
                _node(1, "groupByKey", L, 0),
                _node(2, "count", L, 1, store="s2", store_kind="kv"),
                _node(3, "groupBy", L, 2, fn="mod_key"),
                _node(4, "count", L, 3, store="s4", store_kind="kv"),
                _node(5, "toStream", L, 4),
                _node(6, "to", L, 5, topic="out6"),
                _node(7, "filter", L, 2, fn="even"),
                _node(8, "toStream", L, 7),
                _node(9, "to", L, 8, topic="out9"),
            ],
            [["in0", "a", 1, 0], ["in0", "a", 1, 1], ["in0", "b", 1, 2]],
        ),
        # a stream aggregation's first result for a key carries the initializer's value as
        # its old value (Kafka's KStreamAggregate): a regroup subtracts it, a filter sees it;
        # kstream sent None
        id="aggregate-old-value-is-the-initializer",
    ),
    pytest.param(
        Case(
            [
                _node(0, "stream", S, topic="in0"),
                _node(1, "stream", S, topic="in1"),
                _node(2, "join", S, 0, 1, fn="pair", window={"before": 3, "after": 3, "grace": 0}),
                _node(3, "to", S, 2, topic="out3"),
            ],
            [["in1", "c", "ab", 0], ["in1", "a", None, 17], ["in0", "c", "ba", 0]],
        ),
        # Kafka's join window store takes a keyed record with a None value too (storing
        # nothing): its newest timestamp moves, and older records fall out of retention
        id="stream-join-none-value-moves-retention",
    ),
    pytest.param(
        Case(
            [
                _node(0, "stream", S, topic="in0"),
                _node(1, "globalTable", L, topic="in1", store="s1", store_kind="kv"),
                _node(2, "leftJoin", S, 0, 1, fn="pair", selector="null_key"),
                _node(3, "to", S, 2, topic="out3"),
            ],
            [["in1", "a", 1, 0], ["in0", "a", "x", 1], ["in0", None, "y", 2]],
        ),
        # a left join with a global table forwards joiner(v, None) when the key selector gives
        # None (Kafka 4.x); kstream dropped a keyed record's
        id="global-left-join-none-selected-key",
    ),
    pytest.param(
        Case(
            [
                _node(0, "stream", L, topic="in0"),
                _node(1, "repartition", L, 0),
                _node(2, "map", L, 1, fn="upper_key"),
                _node(
                    3, "outerJoin", S, 2, 1, fn="pair", window={"before": 0, "after": 3, "grace": 5}
                ),
                _node(4, "to", S, 3, topic="out4"),
            ],
            [["in0", "a", 1, 0], ["in0", "A", 2, 1], ["in0", "a", 3, 20]],
        ),
        # a re-keyed stream joined with the stream it came from: the sub-topology reads the
        # repartition topic it writes, and kstream could not size that topic
        id="join-with-own-repartition-topic",
    ),
    pytest.param(
        Case(
            [
                _node(0, "stream", S, topic="in0"),
                _process(1, S, 0, "buffer_wall_clock", store="s1", store_kind="kv", interval=5),
                _process(2, S, 1, "buffer_wall_clock", store="s2", store_kind="kv", interval=10),
                _node(3, "to", S, 2, topic="out3"),
            ],
            [[None, 1], ["in0", "a", "x", 0], [None, 4], ["in0", "a", "x", 0], [None, 12]],
        ),
        # punctuations due at once fire in the order Kafka's punctuation queue holds them
        # (earliest due, then first queued): at wall clock 17 both are due at 10, and the
        # second buffer (queued at init) fires before the first (queued again at 5); kstream
        # fired them in the order the processors were initialized
        id="due-punctuations-fire-in-queue-order",
    ),
]


H1, H2 = [["h", "1"]], [["h", "2"], ["g", None]]
# The Processor API, whatever the fixed seed draws: each library processor once, with a
# stream-time and a wall-clock punctuation, input headers, and wall-clock advances
PROCESSOR_API = [
    pytest.param(
        Case(
            [
                _node(0, "stream", S, topic="in0"),
                _process(1, L, 0, "count", store="s1", store_kind="kv"),
                _node(2, "to", L, 1, topic="out2"),
            ],
            [
                ["in0", "a", "x", 5],
                ["in0", "b", "x", 3],
                ["in0", None, "y", 4],
                ["in0", "a", None, 9],
            ],
        ),
        id="counter-with-a-store",
    ),
    pytest.param(
        Case(
            [
                _node(0, "stream", S, topic="in0"),
                _process(1, S, 0, "buffer_stream_time", store="s1", store_kind="kv", interval=5),
                _node(2, "to", S, 1, topic="out2"),
            ],
            [
                ["in0", "a", "x", 1],
                ["in0", "b", "x", 3],
                ["in0", "b", None, 4],
                ["in0", "c", "y", 7],
                ["in0", "a", "q", 12],
                ["in0", "a", "z", 30],
            ],
        ),
        id="stream-time-punctuation",
    ),
    pytest.param(
        Case(
            [
                _node(0, "stream", S, topic="in0"),
                _process(1, S, 0, "buffer_wall_clock", store="s1", store_kind="kv", interval=5),
                _node(2, "groupByKey", S, 1),
                _node(3, "count", L, 2, store="s3", store_kind="kv"),
                _node(4, "toStream", L, 3),
                _node(5, "to", L, 4, topic="out5"),
            ],
            [
                ["in0", "a", "x", 1],
                [None, 3],
                ["in0", "b", "x", 3],
                [None, 3],
                ["in0", "c", "y", 7],
                [None, 20],
                ["in0", "a", "z", 30],
                [None, 4],
            ],
        ),
        id="wall-clock-punctuation-into-a-repartition",
    ),
    pytest.param(
        Case(
            [
                _node(0, "stream", S, topic="in0"),
                _process(1, S, 0, "add_header"),
                _process(2, S, 1, "headers_text"),
                _node(3, "to", S, 2, topic="out3"),
                _node(4, "groupByKey", S, 1),
                _node(
                    5,
                    "windowedBy",
                    S,
                    4,
                    windows={"type": "time", "size": 5, "advance": 5, "grace": 0},
                    emit="update",
                ),
                _node(6, "count", L, 5, store="s6", store_kind="window"),
                _node(7, "toStream", L, 6, windowed=True),
                _node(8, "to", L, 7, topic="out8"),
            ],
            [["in0", "a", "x", 1, H2], ["in0", "b", "x", 3], ["in0", "a", "y", 4, H1]],
        ),
        id="headers-added-and-read",
    ),
]


@pytest.mark.parametrize("case", PROCESSOR_API)
def test_processor_api_gives_kafka_streams_answers(oracle: Oracle, case: Case) -> None:
    check(oracle, case)


@pytest.mark.parametrize("case", REGRESSIONS)
def test_fixed_divergences_stay_fixed(oracle: Oracle, case: Case) -> None:
    check(oracle, case)
