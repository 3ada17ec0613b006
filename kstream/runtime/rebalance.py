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

Static membership (`group_instance_id`, Kafka's `group.instance.id`): a member that restarts
with the same id within `session.timeout.ms` gets its partitions back without a rebalance, and
librdkafka does not send LeaveGroup when a static member closes.
"""

from __future__ import annotations

import logging
import struct
from typing import Any

from kstream.config import Config
from kstream.topology.compiled import CompiledTopology

log = logging.getLogger("kstream.runtime")

__all__ = ["COOPERATIVE", "EAGER", "effective_protocol", "generation", "group_settings"]

COOPERATIVE = "cooperative"
EAGER = "eager"
_STRATEGY = {COOPERATIVE: "cooperative-sticky", EAGER: "range"}


def effective_protocol(compiled: CompiledTopology, cfg: Config) -> str:
    """The protocol the stream thread runs: `cfg.rebalance_protocol`, or eager when the
    topology's group reads more than one topic (see the module docstring)."""
    if cfg.rebalance_protocol != COOPERATIVE:
        return cfg.rebalance_protocol
    topics = compiled.source_topics
    if len(topics) > 1:
        log.info(
            "rebalance_protocol=cooperative: the group reads %d topics (%s), which the "
            "cooperative-sticky assignor may place without regard to tasks and sub-topologies; "
            "rebalancing eagerly (every task closes on a rebalance)",
            len(topics),
            ", ".join(topics),
        )
        return EAGER
    return COOPERATIVE


def group_settings(cfg: Config, protocol: str) -> dict[str, Any]:
    """The librdkafka settings of the stream thread's group consumer for `protocol`, with
    the static member id when one is configured."""
    out: dict[str, Any] = {"partition.assignment.strategy": _STRATEGY[protocol]}
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
