"""The topology as a Streams group's coordinator needs it (kstream.runtime.streams_topology)."""

from __future__ import annotations

from kstream.config import Config
from kstream.dsl import StreamBuilder
from kstream.kafka.consumer import TopicPartition
from kstream.runtime.streams_topology import partitions_of, streams_topology, task_ids, tasks_of


def _compiled():  # type: ignore[no-untyped-def]
    b = StreamBuilder()
    clicks = b.stream("clicks", key_serde="string", value_serde="string")
    users = b.table("users", key_serde="string", value_serde="string", store="users")
    (
        clicks.select_key(lambda k, v: v)
        .join(users, lambda c, u: f"{c}:{u}")
        .group_by_key()
        .count(store="counts")
        .to_stream()
        .to("out", value_serde="long")
    )
    return b.build().compile("app")


def test_each_sub_topology_names_its_topics_as_the_coordinator_needs_them() -> None:
    compiled = _compiled()
    topo = streams_topology(compiled, Config(replication_factor=3), epoch=0)
    by_id = {s.id: s for s in topo.subtopologies}
    assert sorted(by_id) == sorted(str(s.id) for s in compiled.subtopologies)
    readers = [s for s in topo.subtopologies if s.repartition_source_topics]
    assert len(readers) == 1
    joined = readers[0]
    # the re-keyed clicks come back through a repartition topic, read beside the users table
    assert joined.source_topics == ("users",)
    (rep,) = joined.repartition_source_topics
    assert rep.name.startswith("app-") and rep.name.endswith("-repartition")
    assert rep.replication_factor == 3
    assert rep.configs["cleanup.policy"] == "delete"
    # a join reads partition p of both: one co-partition group over both kinds of source
    (group,) = joined.copartition_groups
    assert group.source_topics == (0,) and group.repartition_source_topics == (0,)
    # changelogs of the sub-topology's stores, partition count left to the broker
    names = {c.name for c in joined.state_changelog_topics}
    assert "app-users-changelog" in names and "app-counts-changelog" in names
    assert all(c.partitions == 0 for c in joined.state_changelog_topics)
    assert all(c.configs["cleanup.policy"] == "compact" for c in joined.state_changelog_topics)
    writer = next(s for s in topo.subtopologies if s is not joined)
    assert writer.source_topics == ("clicks",)
    assert writer.repartition_sink_topics == (rep.name,)
    assert writer.copartition_groups == ()


def test_replication_factor_minus_one_is_the_brokers_default() -> None:
    topo = streams_topology(_compiled(), Config(), epoch=0)
    assert all(
        t.replication_factor == 0
        for s in topo.subtopologies
        for t in (*s.state_changelog_topics, *s.repartition_source_topics)
    )


def test_a_task_reads_partition_p_of_every_topic_of_its_sub_topology() -> None:
    compiled = _compiled()
    joined = next(s for s in compiled.subtopologies if len(s.source_topics) == 2)
    parts = partitions_of(compiled, {(joined.id, 3)})
    assert sorted((p.topic, p.partition) for p in parts) == sorted(
        (t, 3) for t in joined.source_topics
    )
    assert all(isinstance(p, TopicPartition) for p in parts)


def test_task_ids_round_trip() -> None:
    tasks = {(0, 2), (0, 0), (1, 1)}
    ids = task_ids(tasks)
    assert ids == {"0": [0, 2], "1": [1]}
    assert tasks_of(ids) == tasks
    assert tasks_of(None) == set()
