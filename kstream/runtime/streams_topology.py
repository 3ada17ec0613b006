"""The topology as a Streams group's coordinator needs it (KIP-1071), and tasks as partitions.

Under `rebalance_protocol="streams"` the broker assigns tasks, not partitions: it needs each
sub-topology's source topics, the repartition topics it reads and writes, its stores'
changelog topics (which the coordinator creates, with the configs sent here, and whose
partition counts it derives: a changelog's count is sent as 0) and the topics that must be
co-partitioned. Kafka Streams sends the same from its `InternalTopologyBuilder`; kstream's
sub-topology ids are its own numbers as strings, as Kafka Streams' are.

The assignment comes back as task ids (sub-topology id, partition); a task reads partition p of
every topic its sub-topology reads (`partitions_of`), which is what the data consumer assigns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kstream.config import Config
from kstream.kafka.consumer import TopicPartition
from kstream.kafka.streams_group import (
    CopartitionGroup,
    StreamsTopology,
    Subtopology,
    TaskIds,
    TopicInfo,
)
from kstream.topology.compiled import CompiledTopology

__all__ = ["TaskId", "partitions_of", "streams_topology", "task_ids", "tasks_of"]

TaskId = tuple[int, int]


def streams_topology(compiled: CompiledTopology, cfg: Config, epoch: int = 0) -> StreamsTopology:
    """`compiled` as the coordinator's `Topology`: one `Subtopology` per sub-topology (global
    stores are not part of a group's topology, as in Kafka Streams)."""
    rf = max(0, cfg.replication_factor)  # -1 (broker default) is the protocol's 0
    extra = cfg.windowstore_changelog_additional_retention
    repartition = compiled.repartition_topics
    subs: list[Subtopology] = []
    for s in compiled.subtopologies:
        external = tuple(t for t in s.source_topics if t not in repartition)
        internal = tuple(
            TopicInfo(
                t,
                repartition[t].partitions or 0,
                rf,
                repartition[t].topic_config(extra),
            )
            for t in s.source_topics
            if t in repartition
        )
        changelogs = tuple(
            TopicInfo(it.name, 0, rf, it.topic_config(extra))
            for it in compiled.changelog_topics.values()
            if it.subtopology == s.id
        )
        groups: tuple[CopartitionGroup, ...] = ()
        if len(s.source_topics) > 1:
            # every topic a sub-topology reads is co-partitioned with the others (its tasks
            # read partition p of each: a join, a merge)
            groups = (
                CopartitionGroup(
                    tuple(range(len(external))),
                    tuple(range(len(internal))),
                ),
            )
        subs.append(
            Subtopology(
                id=str(s.id),
                source_topics=external,
                repartition_source_topics=internal,
                repartition_sink_topics=tuple(t for t in s.sink_topics if t in repartition),
                state_changelog_topics=changelogs,
                copartition_groups=groups,
            )
        )
    return StreamsTopology(epoch, tuple(subs))


def partitions_of(compiled: CompiledTopology, tasks: Iterable[TaskId]) -> list[TopicPartition]:
    """The partitions the data consumer reads for `tasks`: partition p of every topic of
    sub-topology s, for each task (s, p)."""
    out: list[TopicPartition] = []
    for sid, p in sorted(tasks):
        out += [TopicPartition(t, p) for t in compiled.subtopologies[sid].source_topics]
    return out


def tasks_of(ids: Mapping[str, Iterable[int]] | None) -> set[TaskId]:
    """The protocol's task ids (sub-topology id -> partitions) as kstream's (s, p) pairs."""
    return {(int(sid), p) for sid, parts in (ids or {}).items() for p in parts}


def task_ids(tasks: Iterable[TaskId]) -> TaskIds:
    """kstream's (s, p) pairs as the protocol's task ids, partitions sorted."""
    out: dict[str, list[int]] = {}
    for sid, p in sorted(tasks):
        out.setdefault(str(sid), []).append(p)
    return out
