"""`KTable.group_by(name=)` (Kafka's `Grouped.as(name)`) and the description of a sink with a
topic chooser (Kafka's `TopicNameExtractor`).

The expected descriptions are Kafka Streams 4.1.1's `topology.describe()` of the same DSL
program (`table("t").groupBy(mapper, Grouped.as("by-first"))`, then `count()` and
`reduce(adder, subtractor)` on the one grouped table), with the table given a store name so
that both sides number their nodes alike. `NAMED_AGGREGATIONS` adds names to the aggregations
(`count(Named.as("cnt"))`, `reduce(..., Named.as("red"), Materialized.as("r"))`) and a second,
unnamed grouping with a named count: a given name still takes its index.
"""

from __future__ import annotations

from kstream.dsl import StreamBuilder
from kstream.testing.driver import TopologyTestDriver

NAMED = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [t])
      --> KTABLE-SOURCE-0000000001
    Processor: KTABLE-SOURCE-0000000001 (stores: [users])
      --> by-first
      <-- KSTREAM-SOURCE-0000000000
    Processor: by-first (stores: [])
      --> KSTREAM-SINK-0000000004
      <-- KTABLE-SOURCE-0000000001
    Sink: KSTREAM-SINK-0000000004 (topic: by-first-repartition)
      <-- by-first

  Sub-topology: 1
    Source: KSTREAM-SOURCE-0000000005 (topics: [by-first-repartition])
      --> KTABLE-AGGREGATE-0000000006, KTABLE-REDUCE-0000000010
    Processor: KTABLE-AGGREGATE-0000000006 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000003])
      --> none
      <-- KSTREAM-SOURCE-0000000005
    Processor: KTABLE-REDUCE-0000000010 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000007])
      --> none
      <-- KSTREAM-SOURCE-0000000005

"""

NAMED_AGGREGATIONS = """\
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [t])
      --> KTABLE-SOURCE-0000000001
    Processor: KTABLE-SOURCE-0000000001 (stores: [users])
      --> by-first, KTABLE-SELECT-0000000010
      <-- KSTREAM-SOURCE-0000000000
    Processor: KTABLE-SELECT-0000000010 (stores: [])
      --> cnt2-sink
      <-- KTABLE-SOURCE-0000000001
    Processor: by-first (stores: [])
      --> cnt-sink
      <-- KTABLE-SOURCE-0000000001
    Sink: cnt-sink (topic: by-first-repartition)
      <-- by-first
    Sink: cnt2-sink (topic: KTABLE-AGGREGATE-STATE-STORE-0000000011-repartition)
      <-- KTABLE-SELECT-0000000010

  Sub-topology: 1
    Source: cnt-source (topics: [by-first-repartition])
      --> cnt, red
    Processor: cnt (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000003])
      --> none
      <-- cnt-source
    Processor: red (stores: [r])
      --> none
      <-- cnt-source

  Sub-topology: 2
    Source: cnt2-source (topics: [KTABLE-AGGREGATE-STATE-STORE-0000000011-repartition])
      --> cnt2
    Processor: cnt2 (stores: [KTABLE-AGGREGATE-STATE-STORE-0000000011])
      --> KTABLE-TOSTREAM-0000000015
      <-- cnt2-source
    Processor: KTABLE-TOSTREAM-0000000015 (stores: [])
      --> KSTREAM-SINK-0000000016
      <-- cnt2
    Sink: KSTREAM-SINK-0000000016 (topic: o)
      <-- KTABLE-TOSTREAM-0000000015

"""


def _first_letter(k: str, v: int) -> tuple[str, int]:
    return k[:1], v


def _named() -> StreamBuilder:
    b = StreamBuilder()
    g = b.table("t", "str", "long", store="users").group_by(
        _first_letter, "str", "long", name="by-first"
    )
    g.count()
    g.reduce(lambda a, v: a + v, lambda a, v: a - v)
    return b


def test_a_named_table_grouping_names_its_select_node_and_repartition_topic() -> None:
    # one repartition topic for both aggregations: Kafka reuses a named grouping's
    assert str(_named().build().describe()) == NAMED


def test_named_aggregations_of_a_named_grouping_share_its_topic() -> None:
    b = StreamBuilder()
    t = b.table("t", "str", "long", store="users")
    g = t.group_by(_first_letter, "str", "long", name="by-first")
    g.count(name="cnt")
    g.reduce(lambda a, v: a + v, lambda a, v: a - v, store="r", name="red")
    t.group_by(lambda k, v: (k, v)).count(name="cnt2").to_stream().to("o")
    assert str(b.build().describe()) == NAMED_AGGREGATIONS


def test_without_a_name_the_topic_follows_the_store() -> None:
    b = StreamBuilder()
    b.table("t", "str", "long", store="users").group_by(_first_letter, "str", "long").count()
    described = str(b.build().describe())
    assert "Processor: KTABLE-SELECT-0000000002 (stores: [])" in described
    assert "(topic: KTABLE-AGGREGATE-STATE-STORE-0000000003-repartition)" in described


def test_both_aggregations_of_a_named_grouping_read_the_one_topic() -> None:
    with TopologyTestDriver(_named(), app_id="app") as d:
        assert "app-by-first-repartition" in d.compiled.repartition_topics
        t = d.input_topic("t", "str", "long")
        t.pipe_many([("ann", 1), ("amy", 2), ("bob", 5)])
        t.pipe("amy", 4)  # stays in group "a": 2 is subtracted, 4 added
        counts = d.get_store("KTABLE-AGGREGATE-STATE-STORE-0000000003")
        sums = d.get_store("KTABLE-AGGREGATE-STATE-STORE-0000000007")
        assert (counts.get("a"), counts.get("b")) == (2, 1)
        assert (sums.get("a"), sums.get("b")) == (5, 5)


def test_a_sink_with_a_topic_chooser_is_described_as_kafka_describes_it() -> None:
    """Kafka prints `Sink: <name> (extractor class: <the extractor's toString()>)`."""

    class ByValue:
        def __call__(self, key: object, value: str, ctx: object) -> str:
            return value

        def __str__(self) -> str:
            return "topic is the value"

    b = StreamBuilder()
    b.stream("s", "str", "str").to(ByValue())
    assert str(b.build().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [s])\n"
        "      --> KSTREAM-SINK-0000000001\n"
        "    Sink: KSTREAM-SINK-0000000001 (extractor class: topic is the value)\n"
        "      <-- KSTREAM-SOURCE-0000000000\n\n"
    )
