"""Compilation into sub-topologies, internal topics, co-partitioning, and describe()."""

from __future__ import annotations

import re

import pytest

from kstream import stores
from kstream.dsl import StreamBuilder
from kstream.errors import CoPartitioningError, TopologyError
from kstream.records import Record
from kstream.topology import Processor, Topology


class Noop(Processor):
    def process(self, record: Record) -> None:
        self.ctx.forward(record)


def word_count() -> Topology:
    b = StreamBuilder()
    (
        b.stream("lines", "string", "string")
        .flat_map_values(str.split)
        .group_by(lambda _k, w: w)
        .count(store="counts")
        .to_stream()
        .to("word-counts", "string", "long")
    )
    return b.build()


def test_word_count_compiles_into_two_subtopologies() -> None:
    c = word_count().compile("app")
    assert [s.source_topics for s in c.subtopologies] == [["lines"], ["app-counts-repartition"]]
    assert [s.sink_topics for s in c.subtopologies] == [
        ["app-counts-repartition"],
        ["word-counts"],
    ]
    assert [s.stores for s in c.subtopologies] == [[], ["counts"]]
    assert list(c.repartition_topics) == ["app-counts-repartition"]
    assert c.repartition_topics["app-counts-repartition"].subtopology == 0
    assert list(c.changelog_topics) == ["app-counts-changelog"]
    assert c.changelog_topics["app-counts-changelog"].topic_config() == {
        "cleanup.policy": "compact",
        "message.timestamp.type": "CreateTime",
    }
    assert c.external_source_topics == ["lines"]
    counts = c.resolve_partitions({"lines": 3})
    assert counts == {"lines": 3, "app-counts-repartition": 3, "app-counts-changelog": 3}
    assert c.tasks(counts) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_generated_names_are_deterministic() -> None:
    d1, d2 = str(word_count().describe()), str(word_count().describe())
    assert d1 == d2
    assert "KSTREAM-AGGREGATE-0000000003" in d1


def test_describe_text() -> None:
    # Kafka Streams 4.1's TopologyDescription text for the same DSL program, character for
    # character (tests/oracle/test_describe.py checks generated programs against Kafka itself)
    assert str(word_count().describe()) == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [lines])\n"
        "      --> KSTREAM-FLATMAPVALUES-0000000001\n"
        "    Processor: KSTREAM-FLATMAPVALUES-0000000001 (stores: [])\n"
        "      --> KSTREAM-KEY-SELECT-0000000002\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "    Processor: KSTREAM-KEY-SELECT-0000000002 (stores: [])\n"
        "      --> counts-repartition-filter\n"
        "      <-- KSTREAM-FLATMAPVALUES-0000000001\n"
        "    Processor: counts-repartition-filter (stores: [])\n"
        "      --> counts-repartition-sink\n"
        "      <-- KSTREAM-KEY-SELECT-0000000002\n"
        "    Sink: counts-repartition-sink (topic: counts-repartition)\n"
        "      <-- counts-repartition-filter\n"
        "\n"
        "  Sub-topology: 1\n"
        "    Source: counts-repartition-source (topics: [counts-repartition])\n"
        "      --> KSTREAM-AGGREGATE-0000000003\n"
        "    Processor: KSTREAM-AGGREGATE-0000000003 (stores: [counts])\n"
        "      --> KTABLE-TOSTREAM-0000000007\n"
        "      <-- counts-repartition-source\n"
        "    Processor: KTABLE-TOSTREAM-0000000007 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000008\n"
        "      <-- KSTREAM-AGGREGATE-0000000003\n"
        "    Sink: KSTREAM-SINK-0000000008 (topic: word-counts)\n"
        "      <-- KTABLE-TOSTREAM-0000000007\n"
        "\n"
    )


_MM_NODE = re.compile(r'^ {4}n\d+\["[^"]+"\]$')
_MM_TOPIC = re.compile(r'^ {2}t\d+\(\["[^"]+"\]\)$')
_MM_STORE = re.compile(r'^ {2}s\d+\[\("[^"]+"\)\]$')
_MM_EDGE = re.compile(r"^ {2}([nts]\d+) (-->|-\.-) ([nts]\d+)$")
_MM_SUB = re.compile(r'^ {2}subgraph (sub|glob)\d+\["[^"]+"\]$')


def check_mermaid(text: str) -> tuple[set[str], list[tuple[str, str, str]]]:
    """Check the flowchart's syntax shape line by line; return declared ids and edges."""
    lines = text.rstrip("\n").split("\n")
    assert lines[0] == "flowchart TD"
    declared: set[str] = set()
    edges = []
    depth = 0
    for line in lines[1:]:
        if _MM_SUB.match(line):
            depth += 1
        elif line == "  end":
            depth -= 1
            assert depth == 0
        elif m := _MM_NODE.match(line):
            assert depth == 1
            declared.add(line.split("[")[0].strip())
        elif _MM_TOPIC.match(line) or _MM_STORE.match(line):
            assert depth == 0
            declared.add(line.split("(")[0].split("[")[0].strip())
        elif m := _MM_EDGE.match(line):
            edges.append((m.group(1), m.group(2), m.group(3)))
        else:
            raise AssertionError(f"not a valid flowchart line: {line!r}")
    assert depth == 0
    for a, _, b in edges:
        assert a in declared and b in declared, (a, b)
    return declared, edges


def test_describe_mermaid_parses() -> None:
    text = word_count().describe().to_mermaid()
    declared, edges = check_mermaid(text)
    assert len([d for d in declared if d.startswith("n")]) == 9
    assert sorted(d for d in declared if d[0] in "ts") == ["s0", "t0", "t1", "t2"]
    assert ("n6", "-.-", "s0") in edges  # the aggregate uses the store
    assert ("n4", "-->", "t1") in edges and ("t1", "-->", "n5") in edges  # repartition hop


def test_describe_mermaid_escapes_quotes_and_dot_is_balanced() -> None:
    t = Topology().add_source('s"rc', 'we"ird').add_processor("p", Noop, 's"rc')
    t.add_state_store(stores.key_value("st"), ["p"])
    check_mermaid(t.describe().to_mermaid())
    dot = t.describe().to_dot()
    assert dot.startswith("digraph topology {\n") and dot.endswith("}\n")
    assert dot.count("{") == dot.count("}")
    assert '"s\\"rc" -> "p";' in dot
    assert '"p" -> "store:st" [style=dashed];' in dot
    assert '"topic:we\\"ird" [shape=ellipse, label="we\\"ird"];' in dot


def test_global_store_in_description() -> None:
    b = StreamBuilder()
    b.global_table("countries", "string", "string", store="countries")
    b.stream("in").to("out")
    d = b.build().describe()
    text = str(d)
    # Kafka numbers a global store's part among the sub-topologies, in the order the parts'
    # first nodes were added: the global table came first
    assert text.startswith(
        "Topologies:\n   Sub-topology: 0 for global store (will not generate tasks)\n"
    )
    assert "  Sub-topology: 1\n    Source: KSTREAM-SOURCE-0000000002 (topics: [in])\n" in text
    assert "(topics: [countries])" in text
    check_mermaid(d.to_mermaid())
    assert "cluster_global_0" in d.to_dot()


def test_subtopology_ids_skip_global_stores() -> None:
    """Task ids are Kafka's `<sub-topology>_<partition>`: the sub-topology after a global
    store's part is number 2, and the runtime finds it by that number."""
    b = StreamBuilder()
    b.stream("a").group_by_key().count(store="counts").to_stream().to("out")
    b.global_table("countries", "string", "string", store="countries")
    b.stream("b").select_key(lambda k, v: v).group_by_key().count(store="c2").to_stream().to("o2")
    c = b.build().compile("app")
    assert [s.id for s in c.subtopologies] == [0, 2, 3]
    assert c.global_store_ids == {"countries": 1}
    assert c.subtopologies[2].source_topics == ["b"]
    assert c.subtopology_for_topic("app-c2-repartition").id == 3
    assert c.repartition_topics["app-c2-repartition"].subtopology == 2
    assert c.changelog_topics["app-c2-changelog"].subtopology == 3
    counts = c.resolve_partitions({"a": 2, "b": 3})
    assert c.tasks(counts) == [(0, 0), (0, 1), (2, 0), (2, 1), (2, 2), (3, 0), (3, 1), (3, 2)]
    with pytest.raises(IndexError):
        c.subtopologies[1]


def test_shared_store_joins_subtopologies() -> None:
    t = Topology()
    t.add_source("a", "ta").add_processor("pa", Noop, "a")
    t.add_source("b", "tb").add_processor("pb", Noop, "b")
    t.add_source("c", "tc").add_processor("pc", Noop, "c")
    t.add_state_store(stores.key_value("shared"), ["pa", "pb"])
    c = t.compile("x")
    assert [s.source_topics for s in c.subtopologies] == [["ta", "tb"], ["tc"]]
    assert c.copartition_groups() == [["ta", "tb"]]
    assert c.resolve_partitions({"ta": 4, "tb": 4, "tc": 1})["x-shared-changelog"] == 4
    with pytest.raises(CoPartitioningError, match="ta=4, tb=2"):
        c.resolve_partitions({"ta": 4, "tb": 2, "tc": 1})
    with pytest.raises(TopologyError, match="'tc' does not exist"):
        c.resolve_partitions({"ta": 4, "tb": 4})


def test_repartition_partition_counts() -> None:
    b = StreamBuilder()
    s = b.stream("in")
    s.repartition(name="fixed", partitions=6).to("o1")
    s.repartition(name="follow").to("o2")
    c = b.build().compile("app")
    counts = c.resolve_partitions({"in": 2})
    assert counts["app-fixed-repartition"] == 6
    assert counts["app-follow-repartition"] == 2


def test_store_without_processor_and_empty_topology() -> None:
    with pytest.raises(TopologyError, match="empty"):
        Topology().compile()
    t = Topology().add_source("a", "ta").add_state_store(stores.key_value("lonely"))
    with pytest.raises(TopologyError, match="'lonely' is not connected"):
        t.compile()


def test_depth_first_marking() -> None:
    b = StreamBuilder()
    s = b.stream("a")
    s.filter(lambda k, v: True).merge(s.map_values(lambda v: v)).to("out")
    b.stream("b").filter(lambda k, v: True).to("out2")
    c = b.build().compile()
    assert len(c.subtopologies) == 2
    assert c.subtopologies[0].depth_first_sources == {"KSTREAM-SOURCE-0000000000"}
    assert c.subtopologies[1].depth_first_sources == set()


def test_rekeyed_stream_joined_with_a_table_gets_the_tables_partition_count() -> None:
    from kstream.dsl import StreamBuilder

    b = StreamBuilder()
    customers = b.table("customers", store="customers-store")
    b.stream("orders").select_key(lambda _k, v: v).join(customers, lambda o, c: (o, c)).to("out")
    counts = b.build().compile("app").resolve_partitions({"customers": 4, "orders": 2})
    repartition = [t for t in counts if t.endswith("-repartition")]
    assert len(repartition) == 1
    assert counts[repartition[0]] == 4
    assert counts["app-customers-store-changelog"] == 4
