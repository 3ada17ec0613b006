"""Which group protocol an app starts under: `rebalance_protocol="auto"` resolved, and a switch
of an existing group's type refused at start-up.

A group id names one group of one type at the broker: "classic" (kstream's `cooperative` and
`eager`, librdkafka's JoinGroup), "consumer" (KIP-848, `consumer`) or "streams" (KIP-1071,
`streams`). What Apache Kafka 4.4.0 answers a member of another protocol (measured,
tests/integration/test_streams_protocol_switch.py):

- a Streams heartbeat to a classic group with members, or to a consumer group with or without
  members: GROUP_ID_NOT_FOUND "Group <id> is not a streams group.";
- a Streams heartbeat to a classic group without members: accepted; the group becomes a
  streams group, its committed offsets kept (the offline migration);
- a JoinGroup (classic) to a streams group with members: INCONSISTENT_GROUP_PROTOCOL, which
  librdkafka retries for ever, only reporting it to an error callback; to a streams group
  without members: accepted, the group becomes classic, its offsets kept;
- a ConsumerGroupHeartbeat to a streams group, with or without members: GROUP_ID_NOT_FOUND.

So a group changes protocol only while no instance runs (Kafka Streams' own rule for its
`group.protocol`), and a KIP-848 group never becomes a streams group (delete it, which deletes
its offsets, and write them back). kstream asks the group's coordinator before the stream
thread starts (`probe`), and `choose` decides from what it heard:

- `auto` (the default): the group's own protocol when instances run in it (a rolling upgrade
  keeps the group as it is), and a consumer group's; else `streams` where the broker offers
  Streams groups; else `cooperative` (brokers before Apache Kafka 4.2; 3.9 and 4.1 run so);
- an explicit protocol that the group's type refuses raises `GroupProtocolMismatch`, which
  names the group, its type, the protocol asked and what to do, instead of a member that
  retries or stops later.

Nothing is asked when the app brings its own clients (a `client_supplier`: the streams member
is kstream's own, so `auto` is `cooperative` there) or names Tansu (`broker_compat`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kstream.config import Config
from kstream.errors import ConfigError
from kstream.kafka.streams_group import GroupListing, StreamsGroupClient

log = logging.getLogger("kstream.runtime")

__all__ = [
    "AUTO",
    "GroupFacts",
    "GroupProtocolMismatch",
    "choose",
    "probe",
    "resolve",
    "with_protocol",
]

AUTO = "auto"
#: kstream's protocols by the group type each makes (eager and cooperative: both classic)
GROUP_TYPE = {
    "cooperative": "classic",
    "eager": "classic",
    "consumer": "consumer",
    "streams": "streams",
}
#: what `auto` runs in a group of each type that has members
_FOLLOW = {"classic": "cooperative", "consumer": "consumer", "streams": "streams"}
_STOP_ALL = "stop every instance of the app first (a group changes protocol only while empty)"


class GroupProtocolMismatch(ConfigError):
    """The app's group exists with a type the protocol asked cannot join."""


@dataclass(frozen=True)
class GroupFacts:
    """What the broker said about an app's group: whether it offers Streams groups, and the
    group of the app's id (None: there is none yet)."""

    streams_offered: bool
    group: GroupListing | None


def choose(asked: str, facts: GroupFacts, group_id: str, bootstrap: str) -> str:
    """The protocol the app runs (`asked`: `rebalance_protocol`, "auto" included), or
    GroupProtocolMismatch (module docstring: the rules)."""
    group = facts.group
    if asked == AUTO:
        if (
            group is not None
            and group.type in ("classic", "consumer")
            and (group.has_members or group.type == "consumer")
        ):
            if facts.streams_offered:
                log.info(
                    "rebalance_protocol='auto': group %r is a %s group%s, so this instance "
                    "joins it so (rebalance_protocol=%r); it moves to the Streams protocol "
                    "when %s",
                    group_id,
                    group.type,
                    " with running members" if group.has_members else "",
                    _FOLLOW[group.type],
                    "every instance is stopped and restarted"
                    if group.type == "classic"
                    else "the group is deleted and its offsets written back (a KIP-848 "
                    "group never becomes a streams group)",
                )
            return _FOLLOW[group.type]
        if facts.streams_offered:
            return "streams"
        return "cooperative"
    if asked == "streams" and not facts.streams_offered:
        raise ConfigError(
            f"rebalance_protocol='streams': the broker at {bootstrap} does not offer Streams "
            "groups (KIP-1071: Apache Kafka 4.2 or later, with the streams.version feature "
            "finalized and group.coordinator.rebalance.protocols including 'streams'); use "
            "'auto' (the classic protocol on such a broker), 'cooperative' or 'consumer'"
        )
    if group is None or group.type == GROUP_TYPE[asked]:
        return asked
    refused = _refusal(asked, group)
    if refused is not None:
        raise GroupProtocolMismatch(
            f"rebalance_protocol={asked!r}: group {group_id!r} at {bootstrap} is a "
            f"{group.type} group ({group.state}), which a member of the {GROUP_TYPE[asked]} "
            f"protocol cannot join: {refused}"
        )
    return asked


def _refusal(asked: str, group: GroupListing) -> str | None:
    """What to do when `group` cannot take a member of `asked`, else None."""
    if asked == "streams":
        if group.type == "classic" and not group.has_members:
            return None  # the coordinator converts it, offsets kept
        if group.type == "classic":
            return (
                f"{_STOP_ALL}, then start them all with rebalance_protocol='streams' (the "
                "empty classic group becomes a streams group, its committed offsets kept); or "
                "keep the group's protocol (rebalance_protocol='cooperative' or 'auto')"
            )
        return (
            f"a {group.type} group never becomes a streams group: stop every instance, note "
            "the committed offsets (kafka-consumer-groups.sh --describe), delete the group "
            "(kafka-consumer-groups.sh --delete, which deletes its offsets), start with "
            "rebalance_protocol='streams' and write the offsets back; or keep the group's "
            f"protocol (rebalance_protocol={_FOLLOW.get(group.type, 'auto')!r})"
        )
    if group.type == "streams" and (asked == "consumer" or group.has_members):
        if asked == "consumer":
            return (
                "a streams group never becomes a consumer group: run it with "
                "rebalance_protocol='streams' or 'auto'"
            )
        return (
            f"{_STOP_ALL}, then start them all with rebalance_protocol={asked!r} (the empty "
            "streams group becomes a classic group, its committed offsets kept); or keep the "
            "group's protocol (rebalance_protocol='streams' or 'auto')"
        )
    return None  # classic <-> consumer: the broker's group.consumer.migration.policy decides


def probe(bootstrap: str, kafka: Mapping[str, Any], group_id: str, timeout_s: float) -> GroupFacts:
    """Ask the cluster whether it offers Streams groups, and the type of the group `group_id`.
    StreamsGroupError when it does not answer within `timeout_s`; ConfigError for security
    settings the protocol client cannot carry over."""
    with StreamsGroupClient(bootstrap, kafka, request_timeout_s=timeout_s) as client:
        return GroupFacts(client.supports_streams_groups(group_id), client.group_type(group_id))


def resolve(
    asked: str,
    group_id: str,
    bootstrap: str,
    kafka: Mapping[str, Any],
    timeout_s: float,
    *,
    own_clients: bool,
    tansu: bool,
) -> str:
    """The protocol an app with `rebalance_protocol=asked` runs in group `group_id`, asked of
    the broker at start-up (module docstring); GroupProtocolMismatch when its group's type
    refuses an explicit protocol. `own_clients`: the app brings a client_supplier."""
    if tansu or (own_clients and asked != "streams"):
        return "cooperative" if asked == AUTO else asked
    try:
        facts = probe(bootstrap, kafka, group_id, timeout_s)
    except Exception as e:
        if asked == "streams":
            raise
        # for the other protocols the check is a courtesy (their own clients connect, and
        # say what fails): whatever stops it, the app goes on
        log.warning(
            "rebalance_protocol=%r: could not ask the broker at %s about group %r (%s); %s",
            asked,
            bootstrap,
            group_id,
            e,
            "running the classic protocol (cooperative)" if asked == AUTO else "going on",
        )
        return "cooperative" if asked == AUTO else asked
    chosen = choose(asked, facts, group_id, bootstrap)
    if asked == AUTO:
        log.info("rebalance_protocol='auto': group %r runs %r", group_id, chosen)
    return chosen


def with_protocol(cfg: Config, chosen: str, group_id: str) -> Config:
    """`cfg` with `rebalance_protocol=chosen`, as `resolve` chose it for "auto". A setting the
    chosen protocol refuses (the consumer protocol refuses `kafka["session.timeout.ms"]`) is a
    ConfigError that says why that protocol was chosen."""
    if chosen == cfg.rebalance_protocol:
        return cfg
    try:
        return replace(cfg, rebalance_protocol=chosen)
    except ConfigError as e:
        raise ConfigError(
            f"rebalance_protocol={cfg.rebalance_protocol!r} joins group {group_id!r} as "
            f"{chosen!r}, the group's own protocol, and: {e}"
        ) from None
