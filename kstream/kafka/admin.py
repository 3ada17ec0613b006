"""Topic administration: idempotent create, describe, delete, list.

The engine creates its internal topics on every start, so creating a topic that already exists
with the wanted partition count is success, and one that exists with another count is an error
naming both counts (silently using it would break co-partitioning).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined,unused-ignore]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from kstream.duration import DurationLike
from kstream.errors import ConfigError, TopicError
from kstream.kafka.client import ErrorLog, build_config, check_connected, connect_timeout_s
from kstream.kafka.errors import COORDINATOR_RETRY_S, coordinator_not_ready, map_error
from kstream.kafka.roles import client_config

__all__ = ["Admin", "TopicDescription", "TopicSpec"]

TP = tuple[str, int]


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partition count, replication factor (-1: broker default)."""

    name: str
    partitions: int = 1
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int = -1


@dataclass(frozen=True)
class TopicDescription:
    """A topic as the broker describes it; `config` holds the configs the broker reports."""

    name: str
    partitions: int
    config: dict[str, str]


class Admin:
    """Admin client; fails at construction if the cluster does not answer in `connect_timeout`."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        kafka: Mapping[str, Any] | None = None,
        connect_timeout: DurationLike | None = None,
        request_timeout: DurationLike = 30_000,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._errors = ErrorLog()
        self._timeout = connect_timeout_s(connect_timeout)
        self._request_timeout = connect_timeout_s(request_timeout)
        conf = build_config(
            bootstrap_servers,
            client_config("admin", kafka),
            defaults={},
            forced={},
            errors=self._errors,
            where="Admin",
        )
        self._admin = AdminClient(conf)
        check_connected(self._admin, bootstrap_servers, self._timeout, self._errors, "Admin")

    @property
    def raw(self) -> AdminClient:
        """The underlying confluent-kafka AdminClient, for what this class does not cover."""
        return self._admin

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Sorted topic names (names starting with `__` only with `include_internal`)."""
        try:
            md = self._admin.list_topics(timeout=self._request_timeout)
        except KafkaException as e:
            raise map_error(e, f"listing topics on {self.bootstrap_servers!r}") from None
        names = [t for t in md.topics if include_internal or not t.startswith("__")]
        return sorted(names)

    def partition_counts(self, names: Iterable[str]) -> dict[str, int]:
        """Partition count of each existing topic among `names` (missing ones are left out)."""
        wanted = set(names)
        try:
            md = self._admin.list_topics(timeout=self._request_timeout)
        except KafkaException as e:
            raise map_error(e, "reading topic metadata") from None
        out: dict[str, int] = {}
        for name, t in md.topics.items():
            if name in wanted and t.error is None and t.partitions:
                out[name] = len(t.partitions)
        return out

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        config: Mapping[str, str] | None = None,
        replication_factor: int = -1,
    ) -> bool:
        """Create one topic; True if created, False if it already existed (same partitions)."""
        spec = TopicSpec(name, partitions, dict(config or {}), replication_factor)
        return self.create_topics([spec])[name]

    def create_topics(self, specs: Iterable[TopicSpec]) -> dict[str, bool]:
        """Create topics idempotently; returns {name: created}.

        A topic that already exists with another partition count raises TopicError.
        """
        specs = list(specs)
        for s in specs:
            _check_spec(s)
        if not specs:
            return {}
        new = [
            NewTopic(
                s.name,
                num_partitions=s.partitions,
                replication_factor=s.replication_factor,
                config={k: str(v) for k, v in s.config.items()},
            )
            for s in specs
        ]
        futures = self._admin.create_topics(new, request_timeout=self._request_timeout)
        created: dict[str, bool] = {}
        for s in specs:
            try:
                futures[s.name].result(timeout=self._request_timeout + 5)
                created[s.name] = True
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    created[s.name] = False
                    continue
                raise TopicError(
                    f"creating topic {s.name!r} ({s.partitions} partitions): {_err_text(e)}",
                    code=err.name() if isinstance(err, KafkaError) else None,
                ) from None
        self._wait_until_served([s for s in specs if created[s.name]])
        existing = [s for s in specs if not created[s.name]]
        if existing:
            counts = self.partition_counts(s.name for s in existing)
            for s in existing:
                have = counts.get(s.name)
                if have is not None and have != s.partitions:
                    raise TopicError(
                        f"topic {s.name!r} already exists with {have} partitions, "
                        f"but {s.partitions} were requested"
                    )
        return created

    def _wait_until_served(self, specs: list[TopicSpec]) -> None:
        """Wait until the broker's metadata lists each new topic of `specs` with a leader for
        every partition.

        Under KRaft a topic is created once the controller has committed it; the brokers learn
        it from the metadata log a moment later. A client that subscribes or produces in that
        moment is told the topic does not exist (a consumer may skip it until its next
        metadata refresh). Past the request timeout the topic is left to the clients' retries.
        """
        deadline = time.monotonic() + self._request_timeout
        waiting = {s.name: s.partitions for s in specs}
        while waiting and time.monotonic() < deadline:
            try:
                md = self._admin.list_topics(timeout=self._request_timeout)
            except KafkaException:
                md = None
            for name, want in list(waiting.items()):
                t = md.topics.get(name) if md is not None else None
                if (
                    t is not None
                    and t.error is None
                    and len(t.partitions) == want
                    and all(p.leader >= 0 for p in t.partitions.values())
                    and self._leaders_answer(name, want)
                ):
                    del waiting[name]
            if waiting:
                time.sleep(0.05)

    def _leaders_answer(self, name: str, partitions: int) -> bool:
        """Whether every partition's leader answers for it (its end offset): metadata names a
        leader a moment before that broker takes the partition up, and meanwhile answers
        NOT_LEADER_OR_FOLLOWER."""
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call,unused-ignore]
        wanted = {TopicPartition(name, p): latest for p in range(partitions)}
        try:
            futures = self._admin.list_offsets(wanted, request_timeout=self._request_timeout)
            for fut in futures.values():
                fut.result(timeout=self._request_timeout + 5)
        except KafkaException:
            return False
        return True

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        """Partition counts and reported configs of existing topics; a missing one raises."""
        names = list(names)
        counts = self.partition_counts(names)
        missing = [n for n in names if n not in counts]
        if missing:
            raise TopicError(f"topic(s) not found: {', '.join(map(repr, missing))}")
        resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
        futures = self._admin.describe_configs(resources, request_timeout=self._request_timeout)
        out: dict[str, TopicDescription] = {}
        for res, fut in futures.items():
            try:
                entries = fut.result(timeout=self._request_timeout + 5)
            except KafkaException as e:
                raise map_error(e, f"describing configs of topic {res.name!r}") from None
            config = {k: v.value for k, v in entries.items() if v.value is not None}
            out[res.name] = TopicDescription(res.name, counts[res.name], config)
        return out

    def describe_topic(self, name: str) -> TopicDescription:
        return self.describe_topics([name])[name]

    def delete_topics(self, names: Iterable[str]) -> dict[str, bool]:
        """Delete topics; returns {name: deleted} (False: it did not exist).

        Returns once the broker's metadata no longer lists them (or after the request
        timeout): Apache Kafka deletes a topic asynchronously, and a caller that creates it
        again or lists topics right after must not find the old one.
        """
        names = list(names)
        if not names:
            return {}
        futures = self._admin.delete_topics(names, request_timeout=self._request_timeout)
        out: dict[str, bool] = {}
        for n in names:
            try:
                futures[n].result(timeout=self._request_timeout + 5)
                out[n] = True
            except KafkaException as e:
                err = e.args[0] if e.args else None
                if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    out[n] = False
                    continue
                raise map_error(e, f"deleting topic {n!r}") from None
        self._wait_gone([n for n, deleted in out.items() if deleted])
        return out

    def _wait_gone(self, names: list[str]) -> None:
        deadline = time.monotonic() + self._request_timeout
        while names and time.monotonic() < deadline:
            try:
                listed = self._admin.list_topics(timeout=self._request_timeout).topics
            except KafkaException:
                return
            names = [n for n in names if n in listed]
            if names:
                time.sleep(0.05)

    def delete_records(self, offsets: Mapping[tuple[str, int], int]) -> dict[TP, Future[Any]]:
        """Start deleting the records below `offsets[(topic, partition)]`; returns at once.

        This is DeleteRecords, which Kafka Streams purges consumed repartition records with:
        the broker moves each partition's start offset (its low watermark) up to the offset
        given. Nothing waits here, so a caller on a processing loop is not held up by the
        round trip; each future yields confluent-kafka's `DeletedRecords` (`.low_watermark`)
        or raises KafkaException.
        """
        if not offsets:
            return {}
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        try:
            futures = self._admin.delete_records(tps, request_timeout=self._request_timeout)
        except KafkaException as e:
            raise map_error(e, "deleting records") from None
        return {(tp.topic, tp.partition): f for tp, f in futures.items()}

    def set_group_configs(self, group: str, configs: Mapping[str, str]) -> None:
        """Set group configs of `group` (IncrementalAlterConfigs on its GROUP resource: a
        Streams group's `streams.num.standby.replicas`, a group's session timeout)."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined,unused-ignore]
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
            ResourceType,
        )

        entries = [
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ]
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
        try:
            for f in self._admin.incremental_alter_configs(
                [resource], request_timeout=self._request_timeout
            ).values():
                f.result(self._request_timeout)
        except KafkaException as e:
            raise map_error(
                e, f"setting group configs {dict(configs)!r} of group {group!r}"
            ) from None

    def delete_groups(self, groups: Iterable[str]) -> list[str]:
        """Delete the consumer groups `groups`, and with them their committed offsets; the
        ones that existed (a group that does not is not an error).

        A group whose coordinator is not ready (a broker that has just created or is still
        loading `__consumer_offsets`, or a coordinator that moved) is asked again until the
        request timeout, as Kafka's own admin client does: librdkafka hands those answers
        back rather than retrying them."""
        pending = list(groups)
        deadline = time.monotonic() + self._request_timeout
        deleted: list[str] = []
        while pending:
            futures = self._admin.delete_consumer_groups(
                pending, request_timeout=self._request_timeout
            )
            pending = []
            for name, f in futures.items():
                try:
                    f.result(self._request_timeout)
                except KafkaException as e:
                    err = e.args[0] if e.args else None
                    if isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
                        continue
                    if coordinator_not_ready(e) and time.monotonic() < deadline:
                        pending.append(name)
                        continue
                    raise map_error(e, f"deleting group {name!r}") from None
                deleted.append(name)
            if pending:
                time.sleep(COORDINATOR_RETRY_S)
        return deleted

    def close(self) -> None:
        """Nothing to release explicitly (AdminClient has no close); kept for symmetry."""

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_spec(s: TopicSpec) -> None:
    if not isinstance(s.name, str) or not s.name:
        raise ConfigError(f"topic name must be a non-empty string, got {s.name!r}")
    if isinstance(s.partitions, bool) or not isinstance(s.partitions, int) or s.partitions < 1:
        raise ConfigError(f"topic {s.name!r}: partitions must be an int >= 1, got {s.partitions!r}")


def _err_text(e: KafkaException) -> str:
    err = e.args[0] if e.args else None
    if isinstance(err, KafkaError):
        return f"{err.name()}: {err.str()}"
    return str(e)
