"""How the stream thread's consumer takes part in its group: the rebalance protocol and the
static member id.

Cooperative (the default, as in Kafka Streams since 2.4): the consumer uses confluent-kafka's
`cooperative-sticky` assignor, so a rebalance revokes only the partitions that move; the tasks
that stay keep running with their stores open. Eager (`range`): every rebalance revokes every
partition and closes every task (stop-the-world).

The group assignor hands out partitions, not tasks: Kafka Streams assigns whole tasks, spread
evenly per sub-topology, with an assignor of its own, which confluent-kafka cannot plug in.
`range` gives partition n of every topic to one member and splits every topic evenly, so each
task gets all its partitions (a join, a merge) and every sub-topology's tasks are spread over
the instances. `cooperative-sticky` balances the count of partitions only: it may split a
task that reads several topics between two instances, and it may leave all of one
sub-topology's tasks (all the stateful ones, say) on one instance. So the cooperative protocol
is used when the group reads one topic, where its placement is the same as range's; a
topology that reads more (a repartition topic, a join) rebalances eagerly whatever
`rebalance_protocol` says, and says so in the log at start-up.

Consumer (`rebalance_protocol="consumer"`, Kafka's new consumer group protocol, KIP-848,
librdkafka's `group.protocol=consumer`): the broker assigns the partitions, with its `range`
assignor (`group.remote.assignor`). Rebalances are always incremental: a member revokes only
the partitions that move, there is no JoinGroup barrier, and the tasks that stay run on. The
server-side range assignor (Kafka 4.x, group-coordinator's RangeAssignor) gives each member the
same partition numbers of every subscribed topic with the same partition count, in contiguous
ranges per topic over the members sorted by `group.instance.id` (else member id): every task's
co-partitioned partitions go to one member, and every sub-topology's tasks are spread. So this
protocol is incremental for a topology that reads several topics too; the task manager checks
every assignment all the same (`split_tasks`). It is not sticky for dynamic members: a joining
member may sort before the others and shift their ranges (static members keep their order).
It needs Apache Kafka 4.0 or later (not Tansu). The session timeout and heartbeat interval are
the group's, set on the broker (`group.consumer.session.timeout.ms`,
`group.consumer.heartbeat.interval.ms`, or per group `consumer.session.timeout.ms`), not the
client's: librdkafka refuses `session.timeout.ms`, `heartbeat.interval.ms` and
`partition.assignment.strategy` with this protocol. It stays opt-in: the default, cooperative,
keeps the client-side session settings, whose values a switch would silently replace with the
broker's (45 s by default).

Streams (`rebalance_protocol="streams"`, Kafka Streams' own group protocol, KIP-1071, Apache
Kafka 4.2 or later): the broker assigns tasks, not partitions, with its sticky task assignor;
kstream speaks the protocol from a heartbeat thread (kstream.runtime.streams_member) and reads
the partitions of its tasks in assign mode (kstream.runtime.streams_consumer). Incremental for
every topology; what Apache Kafka 4.4.0 does and does not do with it is in
docs/architecture.md.

Static membership (`group_instance_id`, Kafka's `group.instance.id`): a member that restarts
with the same id within the session timeout gets its partitions back without a rebalance, and
librdkafka does not send LeaveGroup when a static member closes (under the consumer protocol
it leaves with epoch -2, which keeps its assignment for the session timeout).
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from kstream.config import Config
from kstream.errors import ConfigError
from kstream.topology.compiled import CompiledTopology

log = logging.getLogger("kstream.runtime")

__all__ = [
    "CONSUMER",
    "COOPERATIVE",
    "EAGER",
    "STREAMS",
    "JoinWatch",
    "effective_protocol",
    "generation",
    "group_settings",
    "split_tasks",
]

COOPERATIVE = "cooperative"
EAGER = "eager"
CONSUMER = "consumer"
STREAMS = "streams"
_STRATEGY = {COOPERATIVE: "cooperative-sticky", EAGER: "range"}
INCREMENTAL = (COOPERATIVE, CONSUMER, STREAMS)
"""The protocols whose rebalances revoke and assign only the partitions that move."""
BROKER_ASSIGNED = (CONSUMER, STREAMS)
"""The protocols whose broker assigns (no JoinGroup generation barrier to wait out)."""


def effective_protocol(compiled: CompiledTopology, cfg: Config) -> str:
    """The protocol the stream thread runs: `cfg.rebalance_protocol`, or eager when it is
    cooperative and the topology's group reads more than one topic (see the module
    docstring; the consumer protocol keeps a task's partitions together, so it stays).
    "auto" is resolved by the App at start-up (kstream.runtime.streams_protocol); a thread
    made without one, which asked no broker, runs it as cooperative."""
    if cfg.rebalance_protocol not in (COOPERATIVE, "auto"):
        return cfg.rebalance_protocol
    topics = compiled.source_topics
    if len(topics) > 1:
        log.info(
            "rebalance_protocol=cooperative: the group reads %d topics (%s), which the "
            "cooperative-sticky assignor may place without regard to tasks and sub-topologies; "
            "rebalancing eagerly (every task closes on a rebalance; rebalance_protocol="
            "'consumer' rebalances it incrementally on Apache Kafka 4.0 or later)",
            len(topics),
            ", ".join(topics),
        )
        return EAGER
    return COOPERATIVE


def group_settings(cfg: Config, protocol: str) -> dict[str, Any]:
    """The librdkafka settings of the stream thread's group consumer for `protocol`, with
    the static member id when one is configured."""
    out: dict[str, Any]
    if protocol == STREAMS:
        # the data consumer reads in assign mode; the Streams group's member
        # (kstream.runtime.streams_member) carries the static id itself
        return {}
    if protocol == CONSUMER:
        # range: co-partitioned topics' same partition numbers to one member (the default,
        # uniform, balances partition counts only, as cooperative-sticky does)
        out = {"group.protocol": "consumer", "group.remote.assignor": "range"}
    else:
        out = {"partition.assignment.strategy": _STRATEGY[protocol]}
    if cfg.group_instance_id:
        out["group.instance.id"] = cfg.group_instance_id
    return out


_CGMD = b"CGMDv2:"


def generation(consumer: Any) -> int | None:
    """The group generation `consumer` is in now, or None if unknown.

    Read from the group metadata librdkafka hands to transactions (`"CGMDv2:"`, then the
    generation as a native int32; rd_kafka_consumer_group_metadata_write), which is the one
    place confluent-kafka exposes it. librdkafka moves it on when a JoinGroup answers, before
    the rebalance callbacks run: a commit made in between carries a generation the
    coordinator refuses (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS), and under exactly-once
    that aborts the transaction and replays the batch.
    """
    try:
        blob = consumer.consumer_group_metadata()
    except Exception:
        return None
    if not isinstance(blob, bytes) or not blob.startswith(_CGMD) or len(blob) < len(_CGMD) + 4:
        return None
    (gen,) = struct.unpack_from("=i", blob, len(_CGMD))
    return int(gen)


def split_tasks(
    compiled: CompiledTopology, assigned: list[tuple[str, int]]
) -> dict[tuple[int, int], list[tuple[str, int]]]:
    """The tasks of which `assigned` (a consumer's whole assignment) holds some partitions but
    not all, each with the partitions it misses.

    A task reads partition n of every source topic of its sub-topology (a join: both sides;
    a merge: every input); with only some of them here, the others are read by another
    member's task of the same id, and a join would miss matches.
    """
    held = set(assigned)
    out: dict[tuple[int, int], list[tuple[str, int]]] = {}
    seen: set[tuple[int, int]] = set()
    for topic, n in sorted(held):
        sub = compiled.subtopology_for_topic(topic)
        if (sub.id, n) in seen:
            continue
        seen.add((sub.id, n))
        missing = [(t, n) for t in sub.source_topics if (t, n) not in held]
        if missing:
            out[(sub.id, n)] = missing
    return out


class JoinWatch:
    """Whether a consumer subscribed under the consumer protocol ever joined its group.

    A broker without the protocol (before Apache Kafka 4.0 by default, Tansu) does not answer
    librdkafka's ConsumerGroupHeartbeat with an error it reports: the consumer just never gets
    a member epoch (the group metadata's generation stays -1) and nothing is assigned. So the
    stream thread fails with a clear error once `timeout_s` passes without an epoch."""

    def __init__(self, protocol: str, timeout_s: float, bootstrap: str) -> None:
        self.active = protocol == CONSUMER
        self.timeout_s = timeout_s
        self.bootstrap = bootstrap
        self._since: float | None = None

    def subscribed(self, now: float) -> None:
        """The consumer (re)subscribed at `now` (time.monotonic())."""
        self._since = now if self.active else None

    def check(self, consumer: Any, now: float) -> None:
        """Raise ConfigError if the consumer has had no member epoch for `timeout_s`."""
        if self._since is None:
            return
        gen = generation(consumer)
        if gen is None or gen > 0:
            self._since = None  # joined (or a consumer without group metadata): nothing to do
            return
        if now - self._since >= self.timeout_s:
            raise ConfigError(
                f"rebalance_protocol='consumer': the broker at {self.bootstrap} gave the group "
                f"consumer no member epoch within {self.timeout_s:g} s (connect_timeout): "
                "a broker without Kafka's consumer group protocol (KIP-848: Apache Kafka 4.0 "
                "or later, group.coordinator.rebalance.protocols including 'consumer') "
                "answers so, as does a group coordinator that cannot be reached; use "
                "rebalance_protocol='cooperative' or 'eager' with such a broker"
            )
