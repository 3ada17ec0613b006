"""Foreign-key table-table joins (KIP-213) against Kafka Streams' own tests.

Ports of `KTableKTableForeignKeyJoinIntegrationTest` (Kafka 4.x; each test named after the
Kafka test it ports, with its expected outputs): for inner and left joins, with the result
materialized in a store named "store" or not, and with or without a "rejoin" (the result
joined on the key with the left table again, which makes Kafka materialize the result on
demand). The tables are not versioned but in `shouldIgnoreOutOfOrderRecordsIffVersioned`,
which runs every mix of versioned and plain sides. Kafka's assertions read the output as a map
(the last value per key) and the store in full; so do these. The scenarios of
`KTableKTableForeignKeyJoinScenarioTest` that check records one by one, timestamps
included, follow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from kstream.dsl import StreamBuilder
from kstream.testing import TopologyTestDriver

LEFT_TABLE = "left_table"
RIGHT_TABLE = "right_table"
OUTPUT = "output-topic"
REJOIN_OUTPUT = "rejoin-output-topic"
BASE = 1_600_000_000_000  # Kafka's tests start at MockTime's milliseconds


def joiner(v1: Any, v2: Any) -> str:
    return f"({_java(v1)},{_java(v2)})"


def rejoiner(v1: Any, v2: Any) -> str:
    return f"rejoin({_java(v1)},{_java(v2)})"


def _java(v: Any) -> str:
    """Java's string concatenation of a value: null prints as "null"."""
    return "null" if v is None else str(v)


def second_field(value: str) -> str | None:
    """The tests' extractor: `value.split("\\|")[1]`."""
    return value.split("|")[1]


@dataclass
class Run:
    """A running topology of `getTopology` and its topics (Kafka's test fixture)."""

    driver: TopologyTestDriver
    materialized: bool
    rejoin: bool

    def left(self, key: str, value: str | None, ts: int) -> None:
        self.driver.input_topic(LEFT_TABLE, "string", "string").pipe(key, value, timestamp=ts)

    def right(self, key: str, value: str | None, ts: int) -> None:
        self.driver.input_topic(RIGHT_TABLE, "string", "string").pipe(key, value, timestamp=ts)

    def output(self) -> dict[str, Any]:
        return self._as_map(OUTPUT)

    def rejoined(self) -> dict[str, Any]:
        return self._as_map(REJOIN_OUTPUT)

    def _as_map(self, topic: str) -> dict[str, Any]:
        """Kafka's `readKeyValuesToMap`: the last value per key, a tombstone kept as None."""
        return dict(self.driver.output_topic(topic, "string", "string").read_key_values())

    def store(self) -> dict[str, Any]:
        with self.driver.get_store("store").all() as entries:
            return dict(entries)

    def check(self, output: dict[str, Any], store: dict[str, Any] | None = None) -> None:
        """The output since the last check is `output` (as a map) and, materialized, the
        store holds `store` (`output` when not given)."""
        assert self.output() == output
        if self.materialized:
            assert self.store() == (output if store is None else store)


def get_topology(
    materialized: bool,
    left_join: bool,
    rejoin: bool,
    extractor: Callable[[str], str | None] = second_field,
    versioned: tuple[bool, bool] = (False, False),
) -> StreamBuilder:
    """Kafka's `getTopology`: `left.join(right, extractor, joiner, materialized)` (or
    `leftJoin`) to OUTPUT; with `rejoin`, the result joined with `left` again, on the key.
    `versioned` makes the left or right table versioned (Kafka's persistent versioned store,
    5 minutes of history)."""
    b = StreamBuilder()
    history = {True: "5min", False: None}
    left = b.table(LEFT_TABLE, "string", "string", versioned=history[versioned[0]])
    right = b.table(RIGHT_TABLE, "string", "string", versioned=history[versioned[1]])
    store = "store" if materialized else None
    if left_join:
        fk_join = left.left_join(right, extractor, joiner, materialized=store)
    else:
        fk_join = left.join(right, extractor, joiner, materialized=store)
    fk_join.to_stream().to(OUTPUT, "string", "string")
    if rejoin:
        again = "store-rejoin" if materialized else None
        rejoined = (
            fk_join.left_join(left, rejoiner, materialized=again)
            if left_join
            else fk_join.join(left, rejoiner, materialized=again)
        )
        rejoined.to_stream().to(REJOIN_OUTPUT, "string", "string")
    return b


@contextmanager
def running(
    left_join: bool,
    materialized: bool,
    rejoin: bool = False,
    extractor: Callable[[str], str | None] = second_field,
    versioned: tuple[bool, bool] = (False, False),
) -> Iterator[Run]:
    topology = get_topology(materialized, left_join, rejoin, extractor, versioned)
    with TopologyTestDriver(topology) as d:
        yield Run(d, materialized, rejoin)


CASES = pytest.mark.parametrize(
    ("left_join", "materialized", "rejoin"),
    [(lj, m, r) for lj in (True, False) for m in (True, False) for r in (True, False)],
)
CASES_WITHOUT_LEFT_JOIN_ARG = pytest.mark.parametrize(
    ("materialized", "rejoin"), [(m, r) for m in (True, False) for r in (True, False)]
)


@CASES
def test_do_join_from_left_then_delete_left_entity(
    left_join: bool, materialized: bool, rejoin: bool
) -> None:
    """`doJoinFromLeftThenDeleteLeftEntity`."""
    with running(left_join, materialized, rejoin) as t:
        t.right("rhs1", "rhsValue1", BASE)
        t.right("rhs2", "rhsValue2", BASE + 1)
        t.right("rhs3", "rhsValue3", BASE + 2)  # this unreferenced FK won't show up
        t.check({})
        if rejoin:
            assert t.rejoined() == {}

        t.left("lhs1", "lhsValue1|rhs1", BASE + 3)
        t.left("lhs2", "lhsValue2|rhs2", BASE + 4)
        expected = {"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs2": "(lhsValue2|rhs2,rhsValue2)"}
        t.check(expected)
        if rejoin:
            assert t.rejoined() == {
                "lhs1": "rejoin((lhsValue1|rhs1,rhsValue1),lhsValue1|rhs1)",
                "lhs2": "rejoin((lhsValue2|rhs2,rhsValue2),lhsValue2|rhs2)",
            }

        # another reference to an existing FK
        t.left("lhs3", "lhsValue3|rhs1", BASE + 5)
        t.check(
            {"lhs3": "(lhsValue3|rhs1,rhsValue1)"},
            {**expected, "lhs3": "(lhsValue3|rhs1,rhsValue1)"},
        )
        if rejoin:
            assert t.rejoined() == {"lhs3": "rejoin((lhsValue3|rhs1,rhsValue1),lhsValue3|rhs1)"}

        # deleting one LHS entity propagates one delete
        t.left("lhs1", None, BASE + 6)
        t.check(
            {"lhs1": None},
            {"lhs2": "(lhsValue2|rhs2,rhsValue2)", "lhs3": "(lhsValue3|rhs1,rhsValue1)"},
        )
        if rejoin:
            assert t.rejoined() == {"lhs1": None}


@CASES
def test_do_join_from_right_then_delete_right_entity(
    left_join: bool, materialized: bool, rejoin: bool
) -> None:
    """`doJoinFromRightThenDeleteRightEntity`."""
    with running(left_join, materialized, rejoin) as t:
        t.left("lhs1", "lhsValue1|rhs1", BASE)
        t.left("lhs2", "lhsValue2|rhs2", BASE + 1)
        t.left("lhs3", "lhsValue3|rhs1", BASE + 2)
        half = {
            "lhs1": "(lhsValue1|rhs1,null)",
            "lhs2": "(lhsValue2|rhs2,null)",
            "lhs3": "(lhsValue3|rhs1,null)",
        }
        t.check(half if left_join else {})

        t.right("rhs1", "rhsValue1", BASE + 3)
        rhs1 = {"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs3": "(lhsValue3|rhs1,rhsValue1)"}
        t.check(rhs1, {**half, **rhs1} if left_join else rhs1)

        t.right("rhs2", "rhsValue2", BASE + 4)
        full = {**rhs1, "lhs2": "(lhsValue2|rhs2,rhsValue2)"}
        t.check({"lhs2": "(lhsValue2|rhs2,rhsValue2)"}, full)

        t.right("rhs3", "rhsValue3", BASE + 5)  # this unreferenced FK won't show up
        t.check({}, full)

        # deleting the RHS entity propagates deletes (left join: half-joined results)
        t.right("rhs1", None, BASE + 6)
        gone = {
            "lhs1": "(lhsValue1|rhs1,null)" if left_join else None,
            "lhs3": "(lhsValue3|rhs1,null)" if left_join else None,
        }
        lhs2 = {"lhs2": "(lhsValue2|rhs2,rhsValue2)"}
        t.check(gone, {**half, **lhs2} if left_join else lhs2)


@CASES
def test_should_emit_tombstone_when_deleting_non_joining_records(
    left_join: bool, materialized: bool, rejoin: bool
) -> None:
    """`shouldEmitTombstoneWhenDeletingNonJoiningRecords`."""
    with running(left_join, materialized, rejoin) as t:
        t.left("lhs1", "lhsValue1|rhs1", BASE)
        t.check({"lhs1": "(lhsValue1|rhs1,null)"} if left_join else {})
        # an unnecessary tombstone for inner joins (no way to know whether a result was
        # emitted before); a necessary one for left joins
        t.left("lhs1", None, BASE + 1)
        t.check({"lhs1": None}, {})
        # deleting a non-existing record is idempotent
        t.left("lhs1", None, BASE + 2)
        t.check({}, {})


@CASES
def test_should_not_emit_tombstones_when_deleting_non_existing_records(
    left_join: bool, materialized: bool, rejoin: bool
) -> None:
    """`shouldNotEmitTombstonesWhenDeletingNonExistingRecords`."""
    with running(left_join, materialized, rejoin) as t:
        t.left("lhs1", None, BASE)
        t.check({}, {})


@CASES
def test_join_should_produce_nulls_when_value_has_non_matching_foreign_key(
    left_join: bool, materialized: bool, rejoin: bool
) -> None:
    """`joinShouldProduceNullsWhenValueHasNonMatchingForeignKey`."""

    def half(v: str) -> dict[str, Any]:
        return {"lhs1": f"({v},null)"} if left_join else {}

    with running(left_join, materialized, rejoin) as t:
        # no output for a new inner join on a non-existent FK; a left join half-joins
        t.left("lhs1", "lhsValue1|rhs1", BASE)
        t.check(half("lhsValue1|rhs1"))
        # moving to another non-existent FK: an unnecessary tombstone (inner), an update (left)
        t.left("lhs1", "lhsValue1|rhs2", BASE + 1)
        t.check({"lhs1": "(lhsValue1|rhs2,null)" if left_join else None}, half("lhsValue1|rhs2"))
        t.left("lhs1", "lhsValue1|rhs3", BASE + 2)
        t.check({"lhs1": "(lhsValue1|rhs3,null)" if left_join else None}, half("lhsValue1|rhs3"))
        # a RHS record for a key no longer referenced changes nothing
        t.right("rhs1", "rhsValue1", BASE + 3)
        t.check({}, half("lhsValue1|rhs3"))
        # moving to a FK that exists completes the join
        t.left("lhs1", "lhsValue1|rhs1", BASE + 4)
        t.check({"lhs1": "(lhsValue1|rhs1,rhsValue1)"})
        # and moving away again deletes it (inner) or half-joins it (left)
        t.left("lhs1", "lhsValue1|rhs2", BASE + 5)
        t.check({"lhs1": "(lhsValue1|rhs2,null)" if left_join else None}, half("lhsValue1|rhs2"))


@CASES
def test_should_unsubscribe_old_foreign_key_if_left_side_is_updated(
    left_join: bool, materialized: bool, rejoin: bool
) -> None:
    """`shouldUnsubscribeOldForeignKeyIfLeftSideIsUpdated`."""
    with running(left_join, materialized, rejoin) as t:
        t.right("rhs1", "rhsValue1", BASE)
        t.right("rhs2", "rhsValue2", BASE + 1)
        t.check({})
        t.left("lhs1", "lhsValue1|rhs1", BASE + 2)
        t.check({"lhs1": "(lhsValue1|rhs1,rhsValue1)"})
        # change the LHS foreign key reference
        t.left("lhs1", "lhsValue1|rhs2", BASE + 3)
        t.check({"lhs1": "(lhsValue1|rhs2,rhsValue2)"})
        # an update of the old foreign key no longer reaches lhs1
        t.right("rhs1", "rhsValue1Delta", BASE + 4)
        t.check({}, {"lhs1": "(lhsValue1|rhs2,rhsValue2)"})


@CASES_WITHOUT_LEFT_JOIN_ARG
def test_should_emit_record_on_null_foreign_key_for_left_joins(
    materialized: bool, rejoin: bool
) -> None:
    """`shouldEmitRecordOnNullForeignKeyForLeftJoins`."""
    with running(True, materialized, rejoin, extractor=lambda v: None) as t:
        t.left("lhs1", "lhsValue1|rhs1", BASE)
        t.check({"lhs1": "(lhsValue1|rhs1,null)"})


@CASES_WITHOUT_LEFT_JOIN_ARG
def test_should_emit_record_when_old_and_new_fk_differ(materialized: bool, rejoin: bool) -> None:
    """`shouldEmitRecordWhenOldAndNewFkDiffer`: moving to a None foreign key unsubscribes
    the old one (its entry leaves the subscription store) and half-joins the row."""

    def extractor(value: str) -> str | None:
        split = value.split("|")[1]
        return None if split == "returnNull" else split

    with running(True, materialized, rejoin, extractor) as t:
        (name,) = [s for s in t.driver.compiled.topology.stores if "SUBSCRIPTION-STATE-STORE" in s]
        subscriptions = t.driver.get_store(name)
        # Kafka's subscriptionStoreKey("lhs1", "rhs1"): the FK's length, the FK, the key
        key = len(b"rhs1").to_bytes(4, "big") + b"rhs1" + b"lhs1"
        t.left("lhs1", "lhsValue1|rhs1", BASE)
        t.check({"lhs1": "(lhsValue1|rhs1,null)"})
        assert subscriptions.get(key) is not None
        t.left("lhs1", "lhsValue1|returnNull", BASE)
        t.check({"lhs1": "(lhsValue1|returnNull,null)"})
        assert subscriptions.get(key) is None


@pytest.mark.parametrize(
    ("left_join", "materialized", "left_versioned", "right_versioned"),
    [(lj, m, lv, rv) for lj in (1, 0) for m in (1, 0) for lv in (1, 0) for rv in (1, 0)],
)
def test_should_ignore_out_of_order_records_iff_versioned(
    left_join: bool, materialized: bool, left_versioned: bool, right_versioned: bool
) -> None:
    """`shouldIgnoreOutOfOrderRecordsIffVersioned`: an out-of-order update (older than its
    key's latest) of a versioned side is not joined (KIP-914), of a plain side it is joined
    as any other."""
    versioned = (bool(left_versioned), bool(right_versioned))
    with running(bool(left_join), bool(materialized), versioned=versioned) as t:
        t.right("rhs1", "rhsValue1", BASE + 4)
        t.check({})
        t.left("lhs1", "lhsValue1|rhs1", BASE + 3)
        t.left("lhs2", "lhsValue2|rhs1", BASE + 5)
        t.check({"lhs1": "(lhsValue1|rhs1,rhsValue1)", "lhs2": "(lhsValue2|rhs1,rhsValue1)"})
        # a tombstone as the latest record
        t.left("lhs2", None, BASE + 6)
        t.check({"lhs2": None}, {"lhs1": "(lhsValue1|rhs1,rhsValue1)"})
        # out-of-order LHS records (for existing keys) produce new results iff LHS is plain
        t.left("lhs1", "lhsValue1_ooo|rhs1", BASE + 2)
        t.left("lhs2", "lhsValue2_ooo|rhs1", BASE + 2)
        if left_versioned:
            t.check({}, {"lhs1": "(lhsValue1|rhs1,rhsValue1)"})
        else:
            ooo = {
                "lhs1": "(lhsValue1_ooo|rhs1,rhsValue1)",
                "lhs2": "(lhsValue2_ooo|rhs1,rhsValue1)",
            }
            t.check(ooo)
        # and so does an out-of-order LHS tombstone
        t.left("lhs1", None, BASE + 2)
        if left_versioned:
            t.check({}, {"lhs1": "(lhsValue1|rhs1,rhsValue1)"})
        else:
            t.check({"lhs1": None}, {"lhs2": "(lhsValue2_ooo|rhs1,rhsValue1)"})
        # LHS records with larger timestamps
        t.left("lhs1", "lhsValue1_new|rhs1", BASE + 8)
        t.left("lhs2", "lhsValue2_new|rhs1", BASE + 8)
        t.check(
            {"lhs1": "(lhsValue1_new|rhs1,rhsValue1)", "lhs2": "(lhsValue2_new|rhs1,rhsValue1)"}
        )
        latest = {
            "lhs1": "(lhsValue1_new|rhs1,rhsValue1)",
            "lhs2": "(lhsValue2_new|rhs1,rhsValue1)",
        }
        # an out-of-order RHS record is joined iff RHS is plain
        t.right("rhs1", "rhsValue1_ooo", BASE + 1)
        if right_versioned:
            t.check({}, latest)
        else:
            t.check(
                {
                    "lhs1": "(lhsValue1_new|rhs1,rhsValue1_ooo)",
                    "lhs2": "(lhsValue2_new|rhs1,rhsValue1_ooo)",
                }
            )
        # and an out-of-order RHS tombstone deletes (inner) or half-joins (left) iff plain
        t.right("rhs1", None, BASE + 1)
        if right_versioned:
            t.check({}, latest)
        elif left_join:
            t.check({"lhs1": "(lhsValue1_new|rhs1,null)", "lhs2": "(lhsValue2_new|rhs1,null)"})
        else:
            t.check({"lhs1": None, "lhs2": None}, {})
        # RHS records with larger timestamps
        t.right("rhs1", "rhsValue1_new", BASE + 6)
        t.check(
            {
                "lhs1": "(lhsValue1_new|rhs1,rhsValue1_new)",
                "lhs2": "(lhsValue2_new|rhs1,rhsValue1_new)",
            }
        )


@pytest.mark.parametrize("left_join", [False, True])
def test_should_support_foreign_key_join_of_two_re_keyed_tables(left_join: bool) -> None:
    """`KStreamImplTest.shouldSupportForeignKeyTableTableJoinWithKTableFromKStream` with both
    tables re-keyed (`selectKey(...).toTable()`), so both come through repartition topics: each
    side's sub-topology reads the subscription topic the other writes. With inputs of 2 and 4
    partitions Kafka's `RepartitionTopics` and `CopartitionedTopicsEnforcer` give every
    repartition and subscription topic 4 (each is co-partitioned with a topic of 4)."""
    b = StreamBuilder()
    left = b.stream("input1", "string", "string").select_key(lambda k, v: k).to_table()
    right = b.stream("input2", "string", "string").select_key(lambda k, v: k).to_table()
    join = left.left_join if left_join else left.join
    join(right, second_field, joiner).to_stream().to(OUTPUT, "string", "string")
    topology = b.build()

    compiled = topology.compile("app")
    counts = compiled.resolve_partitions({"input1": 2, "input2": 4})
    for s in compiled.subtopologies:
        assert len({counts[t] for t in s.source_topics}) == 1, s.source_topics
    registration = next(t for t in counts if "SUBSCRIPTION-REGISTRATION" in t)
    response = next(t for t in counts if "SUBSCRIPTION-RESPONSE" in t)
    assert compiled.subtopology_for_topic(registration) is not compiled.subtopology_for_topic(
        response
    )
    internal = [t for t in counts if t.endswith(("-repartition", "-topic"))]
    assert len(internal) == 4
    assert {counts[t] for t in internal} == {4}

    with TopologyTestDriver(topology) as d:
        lhs = d.input_topic("input1", "string", "string")
        rhs = d.input_topic("input2", "string", "string")
        out = d.output_topic(OUTPUT, "string", "string")
        rhs.pipe("rhs1", "rhsValue1")
        rhs.pipe("rhs2", "rhsValue2")
        rhs.pipe("rhs3", "rhsValue3")  # an unreferenced foreign key: in no result
        assert dict(out.read_key_values()) == {}
        lhs.pipe("lhs1", "lhsValue1|rhs1")
        lhs.pipe("lhs2", "lhsValue2|rhs2")
        assert dict(out.read_key_values()) == {
            "lhs1": "(lhsValue1|rhs1,rhsValue1)",
            "lhs2": "(lhsValue2|rhs2,rhsValue2)",
        }
        lhs.pipe("lhs3", "lhsValue3|rhs1")  # another reference to an existing foreign key
        assert dict(out.read_key_values()) == {"lhs3": "(lhsValue3|rhs1,rhsValue1)"}
        lhs.pipe("lhs1", None)
        assert dict(out.read_key_values()) == {"lhs1": None}
