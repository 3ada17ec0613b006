"""The stream thread's consumer under `rebalance_protocol="streams"` (KIP-1071).

The task manager knows one way to be given and relieved of work: the rebalance callbacks a
group consumer runs inside its poll (`on_revoke`, `on_assign`, `on_lost`, with partitions),
incremental as under the cooperative protocol. This consumer keeps that contract for a Streams
group: it reads in assign mode (no subscription: the data never joins a classic group), and at
the start of each `consume_batch` it turns what the heartbeat thread heard
(kstream.runtime.streams_member) into those callbacks:

1. fenced: every partition held is lost (`on_lost`: the tasks roll back, nothing commits);
2. a new target: the partitions of active tasks no longer wanted are revoked (`on_revoke`: the
   thread commits every task, then closes those), then those of new tasks assigned
   (`on_assign`: restore and create; an empty list still marks the assignment done);
3. what it owns now goes to the member, whose next heartbeat reports it.

A task's partitions are partition p of every topic its sub-topology reads. Offsets commit under
the member's id and epoch: transactions take them from `consumer_group_metadata`, and a plain
commit (at_least_once) goes through the member's protocol client, as the coordinator refuses
librdkafka's own commits of a group that has Streams members.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from confluent_kafka import Message

from kstream.errors import ConfigError
from kstream.kafka.admin import Admin
from kstream.kafka.consumer import Consumer, RebalanceCallback, TopicPartition
from kstream.kafka.streams_group import StreamsGroupClient
from kstream.runtime.process_id import process_id
from kstream.runtime.streams_member import StreamsMember
from kstream.runtime.streams_topology import TaskId, partitions_of, streams_topology
from kstream.runtime.tasks import RuntimeContext
from kstream.topology.compiled import CompiledTopology

__all__ = ["StreamsGroupConsumer", "streams_group_consumer"]


class StreamsGroupConsumer(Consumer):
    """A consumer whose assignment is its Streams group member's target (module docstring)."""

    def __init__(
        self,
        bootstrap_servers: str,
        member: StreamsMember,
        compiled: CompiledTopology,
        **kwargs: Any,
    ) -> None:
        super().__init__(bootstrap_servers, **kwargs)
        self.member = member
        self._compiled = compiled
        self._on_assign: RebalanceCallback | None = None
        self._on_revoke: RebalanceCallback | None = None
        self._on_lost: RebalanceCallback | None = None
        self._active: set[TaskId] = set()
        #: where the standby and warm-up tasks of each target go (the thread's standbys'
        #: `follow`); None: nowhere (standbys off)
        self.on_standbys: Callable[[set[TaskId]], None] | None = None

    def subscribe(
        self,
        topics: Sequence[str],
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Join the Streams group (`topics`: the topology's, which the member sent)."""
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        self.member.start()

    def unsubscribe(self) -> None:
        """Give up every partition and rejoin (the thread's producer was fenced and its tasks
        closed: it starts over under a new epoch, as a classic member leaves and rejoins)."""
        self._active.clear()
        self.unassign()
        self.member.rejoin()

    def consume_batch(self, max_records: int, timeout_s: float) -> list[Message]:
        self.reconcile()
        return super().consume_batch(max_records, timeout_s)

    def reconcile(self) -> None:
        """Apply what the member heard since the last call (module docstring)."""
        if self.member.error is not None:
            raise self.member.error
        if self.member.take_lost():
            parts = partitions_of(self._compiled, self._active)
            self._active.clear()
            if parts:
                self._forget(parts)
                callback = self._on_lost or self._on_revoke
                if callback is not None:
                    callback(parts)
        target = self.member.take_target()
        if target is None:
            return
        revoke = self._active - target.active
        if revoke:
            parts = partitions_of(self._compiled, revoke)
            self._forget(parts)
            if self._on_revoke is not None:
                self._on_revoke(parts)
            self._active -= revoke
        assign = target.active - self._active
        if self._on_assign is not None:
            self._on_assign(partitions_of(self._compiled, assign))
        self._active |= assign
        standbys = set(target.standby | target.warmup) - self._active
        if self.on_standbys is not None:
            self.on_standbys(standbys)
        self.member.applied(target, self._active, standbys if self.on_standbys else set())

    def consumer_group_metadata(self) -> Any:
        """The member's id and epoch, for `Producer.send_offsets`."""
        return self.member.metadata()

    def commit(
        self,
        offsets: Iterable[TopicPartition | tuple[str, int, int]] | None = None,
    ) -> None:
        """Commit `offsets` as the member (OffsetCommit with its id and epoch); None: the
        current positions."""
        if offsets is None:
            current = self.raw.position(self.raw.assignment())
            tps = [tp for tp in current if tp.offset is not None and tp.offset >= 0]
        else:
            tps = [o if isinstance(o, TopicPartition) else TopicPartition(*o) for o in offsets]
        if tps:
            self.member.commit_offsets({(tp.topic, tp.partition): tp.offset for tp in tps})

    def close(self) -> None:
        """Leave the group, then release the client."""
        try:
            self.member.close()
        finally:
            super().close()


def streams_group_consumer(ctx: RuntimeContext, kafka: dict[str, Any]) -> StreamsGroupConsumer:
    """The stream thread's consumer and Streams group member for `ctx`'s app; ConfigError
    when the broker does not offer Streams groups."""
    cfg = ctx.config
    client = StreamsGroupClient(ctx.bootstrap_servers, cfg.kafka)
    try:
        if not client.supports_streams_groups(ctx.app_id):
            raise ConfigError(
                f"rebalance_protocol='streams': the broker at {ctx.bootstrap_servers} does not "
                "offer Streams groups (KIP-1071: Apache Kafka 4.2 or later with the "
                "streams.version feature finalized and group.coordinator.rebalance.protocols "
                "including 'streams'); use 'auto', 'cooperative' or 'consumer'"
            )
    except BaseException:
        client.close()
        raise
    if cfg.num_standby_replicas > 0:
        # the coordinator places standbys by the group's config (the broker's own default is
        # none; it caps the count at group.streams.max.standby.replicas, 2 by default)
        with Admin(
            ctx.bootstrap_servers, kafka=cfg.kafka, connect_timeout=cfg.connect_timeout
        ) as a:
            a.set_group_configs(
                ctx.app_id, {"streams.num.standby.replicas": str(cfg.num_standby_replicas)}
            )
    member = StreamsMember(
        client,
        ctx.app_id,
        streams_topology(ctx.compiled, cfg),
        process_id=process_id(cfg.state_dir, ctx.app_id),
        instance_id=cfg.group_instance_id,
        endpoint=_endpoint(cfg.http),
        rebalance_timeout_ms=int(cfg.kafka.get("max.poll.interval.ms", 300_000)),
    )
    return StreamsGroupConsumer(
        ctx.bootstrap_servers,
        member,
        ctx.compiled,
        group_id=ctx.app_id,
        kafka=kafka,
        connect_timeout=cfg.connect_timeout,
    )


def _endpoint(http: str | None) -> tuple[str, int] | None:
    """The app's `http` address ("host:port") as the member's Interactive Queries endpoint."""
    if not http:
        return None
    host, _, port = str(http).rpartition(":")
    return (host or "127.0.0.1", int(port))
